"""Which requests a server process of bench/spec_bench.py gets, and the check that it never
gets one twice.

Our "on" server's suffix draft store (engine/core/drafts/suffix.py) keeps the prompts and
outputs of finished requests: a request the process has answered before is drafted from its
own answer, which measures a cache, not speculation. So every (cell, run) gets fresh server
processes, and within a process every request is new: the warm-up takes the END of the
task's pool (or, for the endless chat pool, numbers far from the measured ones), the
measured run takes requests 0..count-1. `check_plan` runs a run's requests through a
`SentBodies` before anything is started (the plan depends on the arguments only, never on
results); during the run every body sent passes through the process's own `SentBodies`,
which raises `RepeatedRequest` on a request it has seen.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from bench.spec_tasks import Task

WARMUP_CHAT_BASE = 1_000_000     # the endless pool's warm-up requests start at this index
WARMUP_MAX_TOKENS = 32           # the warm-up loads the code paths, it need not finish answers
# Fields that say how an answer is delivered or bounded, not what is asked: two bodies that
# differ only in these are the same request (the second is drafted from the first's answer).
DELIVERY_FIELDS = frozenset({"model", "stream", "stream_options", "max_tokens",
                             "max_completion_tokens", "temperature", "top_p", "seed",
                             "ignore_eos", "prediction"})


class RepeatedRequest(AssertionError):
    """A server process was about to get a request it had been sent before."""


def request_key(body: bytes) -> str:
    """The request a body asks, as a hash: its JSON less DELIVERY_FIELDS, keys sorted."""
    doc = {k: v for k, v in json.loads(body).items() if k not in DELIVERY_FIELDS}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class SentBodies:
    """The keys of every request one server process was sent (warm-up included)."""

    def __init__(self, server: str):
        self.server = server
        self.keys: set[str] = set()

    def admit(self, body: bytes) -> bytes:
        """`body`, recorded; RepeatedRequest if this process was sent the request before."""
        key = request_key(body)
        if key in self.keys:
            raise RepeatedRequest(f"{self.server} was sent this request before: "
                                  f"{body[:120]!r}...")
        self.keys.add(key)
        return body

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class RunPlan:
    """The task's request indices one server process gets: the warm-up, then the measured."""
    warmup: tuple[int, ...]
    measured: tuple[int, ...]


def run_plan(task: Task, count: int, warmups: int) -> RunPlan:
    """Measured requests 0..count-1; the warm-up from the pool's end (or far off, endless)."""
    size = task.size
    if size is None:
        warmup = range(WARMUP_CHAT_BASE, WARMUP_CHAT_BASE + warmups)
    elif count + warmups > size:
        raise RepeatedRequest(f"task {task.name} has {size} distinct requests; a run needs "
                              f"{count} measured + {warmups} warm-up (fewer streams, "
                              "--per-stream or --warmup-requests)")
    else:
        warmup = range(size - warmups, size)
    return RunPlan(tuple(warmup), tuple(range(count)))


def check_plan(task: Task, plan: RunPlan) -> None:
    """A dry run of one process's requests: RepeatedRequest if any of them repeats."""
    sent = SentBodies(f"the plan of {task.name}")
    for i in plan.warmup + plan.measured:
        sent.admit(task.body(i, "plan"))
