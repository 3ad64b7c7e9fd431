"""Speculation off vs on, per task, at 1, 4 and 16 streams; llama-server beside it on demand.

The speculation benchmark. Four tasks of fixed, purpose-written requests (bench/spec_tasks.py:
edit with a predicted output, extract into a JSON Schema, a 10-turn agent loop with two
tools, plain chat). Our server runs as "off" (`speculative = "none"`) and "on" (runtime.toml's
default), each in a process of its own (bench/load_server.py's `spawned`); with `--llama` a
third, llama-server on the same GGUF, which gets the same requests less `prediction`.

A cell is (task, streams): N clients each sending that task's requests back to back
(closed loop, bench/load_client.py's `run_load` in count mode: at least `--per-stream`
requests per client and the task's minimum, a whole agent loop), and its figure is output
tok/s of whole requests: completion tokens from the usage chunks over the time from the
first send to the last byte. The cell runs `--runs` times, alternating the servers (off, on,
llama, off, on, llama, ...), and EVERY (cell, run) starts each server afresh: a process that
had answered a request before would draft a repeat of it from its suffix store (the answer
itself, acceptance ~1), and llama-server's slots would hold earlier runs' prompts (restarting
it, rather than sending `cache_prompt: false`, keeps the prompt reuse it has within a run,
as our prefix cache keeps ours). A fresh server gets `--warmup-requests` of the task's
requests that the run does not measure (the end of the task's pool, at most 32 tokens each,
not counted), then the measured requests 0..N-1, the same in every run and for every
server; no server process is ever sent a request twice (bench/spec_plan.py: the whole plan
is checked before the first server starts, and every body sent passes the process's own
record of what it was sent; "the same" ignores stream, max_tokens, prediction and the like).

The table shows the median tok/s per server, on/off, the acceptance rate (drafted vs
accepted tokens from the "on" server's /metrics across the cell's runs, per draft source
where the server exposes one; "-" when it exposes none), and ours (on) over llama-server;
a tok/s marked "!" had failed requests (a request whose connection closed before any byte
of its answer is sent again once, by the client, and counted as resent). One JSON line per
cell follows the table, with each server's failed and resent requests and per-run figures.

    python bench/spec_bench.py --quick                          # smoke run, 16 server starts
    python bench/spec_bench.py                                  # off vs on, 1/4/16 streams, 3 runs
    python bench/spec_bench.py --llama                          # + llama-server (make bench-deps)
    python bench/spec_bench.py --tasks edit,agent --streams 1 --runs 5

`--llama` starts .bench/llama.cpp/build/bin/llama-server (`--llama-bin` for another) with
`-t 2 --parallel <max streams> --cont-batching --jinja` (tools need its jinja templates) on
artifacts/models/smol-135m's GGUF. Never run by the tests (tests/bench/test_spec_tasks.py
checks the tasks and this module's arithmetic, tests/bench/test_spec_plan.py the plan).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.child_server import Server                                    # noqa: E402
from bench.family_speed import LLAMA_SERVER, gguf_of, llama_server       # noqa: E402
from bench.load_client import LoadResult, run_load                       # noqa: E402
from bench.load_server import Endpoint, settings_env, spawned            # noqa: E402
from bench.spec_plan import (WARMUP_MAX_TOKENS, RunPlan, SentBodies,     # noqa: E402
                             check_plan, run_plan)
from bench.spec_tasks import Task, tasks                                 # noqa: E402

OFF, ON, LLAMA = "off", "on", "llama"
OURS = {OFF: ["speculative=none"], ON: []}     # ON: runtime.toml's default speculation
LLAMA_MODEL = "smol-135m"
# /metrics samples of drafted / accepted speculative tokens, whatever their exact names:
# tl_..spec..draft..{source="x"} and tl_..spec..accept..{source="x"} (the label optional)
SPEC_SAMPLE = re.compile(r'^tl_\w*spec\w*?(draft|accept)\w*(?:\{(.*)\})?$')
SOURCE_LABEL = re.compile(r'source="([^"]*)"')
ALL_SOURCES = "all"
FAILED_MARK = "!"                # after a server's tok/s in the table: it had failed requests
QUICK = {"streams": "1,4", "runs": 1, "per_stream": 1, "warmup_requests": 1,
         "max_tokens_cap": 32, "min_requests": False}


@dataclass(frozen=True)
class Contender:
    """A server process in the alternation: its name (off / on / llama), where it listens,
    and every request it was sent (none may repeat)."""
    name: str
    endpoint: Endpoint
    server: Server | None = None     # ours: its /metrics is read around the run
    sent: SentBodies = field(default_factory=lambda: SentBodies("a server"))

    @property
    def foreign(self) -> bool:
        return self.server is None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="edit,extract,agent,chat")
    p.add_argument("--streams", default="1,4,16")
    p.add_argument("--runs", type=int, default=3, help="alternating runs per cell (median)")
    p.add_argument("--per-stream", type=int, default=2, help="requests per client and run")
    p.add_argument("--warmup-requests", type=int, default=2, help="per server process")
    p.add_argument("--max-tokens-cap", type=int, default=0, help="cap every max_tokens (0: none)")
    p.add_argument("--model-dir", default=None, help="our server's model (default: runtime.toml's)")
    p.add_argument("--llama", action="store_true", help="start llama-server beside ours")
    p.add_argument("--llama-bin", type=Path, default=LLAMA_SERVER)
    p.add_argument("--llama-threads", type=int, default=2)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 1 run at 1 and 4 streams, 32 tokens")
    args = p.parse_args(argv)
    args.min_requests = True
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    return args


def contender_names(args: argparse.Namespace) -> list[str]:
    return [OFF, ON] + ([LLAMA] if args.llama else [])


@contextmanager
def fresh(name: str, args: argparse.Namespace, parallel: int) -> Iterator[Contender]:
    """A new server process for one (cell, run): ours with speculation off or on, or
    llama-server (restarted too: its slots keep the last prompt's KV, which would make a
    later run's prompts cheaper than the first's)."""
    if name == LLAMA:
        with llama_server(gguf_of(LLAMA_MODEL), ("--jinja",), parallel=parallel,
                          threads=args.llama_threads, binary=args.llama_bin) as (endpoint, proc):
            yield Contender(LLAMA, endpoint, sent=SentBodies(f"llama-server pid {proc.pid}"))
        return
    with spawned(args.model_dir, settings_env(OURS[name]), name) as (endpoint, server):
        yield Contender(name, endpoint, server, SentBodies(f"{name} pid {server.proc.pid}"))


def body_maker(task: Task, contender: Contender, indices: tuple[int, ...], cap: int):
    """make_body(i) for run_load: request indices[i] of the task, max_tokens capped if
    `cap`, recorded in the contender's sent requests (which refuse a repeat)."""
    def make(i: int) -> bytes:
        body = task.body(indices[i], contender.endpoint.model, contender.foreign)
        if cap:
            doc = json.loads(body)
            doc["max_tokens"] = min(doc["max_tokens"], cap)
            body = json.dumps(doc).encode()
        return contender.sent.admit(body)
    return make


def whole_requests(result: LoadResult) -> dict:
    """Output tok/s of whole requests: usage completion tokens of the requests that ended
    well, over first send to last byte; how many ended well, failed, had no usage, or were
    sent again (their first connection closed unanswered: bench/load_client.py)."""
    records = result.records
    ok = [r for r in records if r.ok]
    tokens = sum(r.usage_tokens for r in ok)
    span_s = (max((r.ended_s for r in records), default=0.0)
              - min((r.sent_s for r in records), default=0.0))
    return {"tok_s": round(tokens / span_s, 2) if span_s > 0 else 0.0,
            "completion_tokens": tokens, "seconds": round(span_s, 3), "requests_ok": len(ok),
            "requests_failed": len(records) - len(ok),
            "without_usage": sum(1 for r in ok if not r.usage_tokens),
            "requests_resent": sum(r.resent for r in records)}


def spec_counts(samples: dict[str, float]) -> dict[str, list[float]]:
    """{source: [drafted, accepted]} from /metrics samples (ALL_SOURCES for unlabelled ones)."""
    out: dict[str, list[float]] = {}
    for name, value in samples.items():
        match = SPEC_SAMPLE.match(name)
        if not match:
            continue
        label = SOURCE_LABEL.search(match.group(2) or "")
        source = label.group(1) if label else ALL_SOURCES
        out.setdefault(source, [0.0, 0.0])[match.group(1) == "accept"] += value
    return out


def spec_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, list[float]]:
    """Drafted / accepted tokens per source between two /metrics reads."""
    early, late = spec_counts(before), spec_counts(after)
    return {s: [late[s][0] - early.get(s, [0.0, 0.0])[0], late[s][1] - early.get(s, [0.0, 0.0])[1]]
            for s in late}


def acceptance(by_source: dict[str, list[float]]) -> float | None:
    """Accepted over drafted: the unlabelled totals if the server has them, else the sum of
    the sources; None when nothing was drafted (or no counters exist)."""
    pairs = ([by_source[ALL_SOURCES]] if ALL_SOURCES in by_source else list(by_source.values()))
    drafted = sum(p[0] for p in pairs)
    return round(sum(p[1] for p in pairs) / drafted, 3) if drafted > 0 else None


def cell_requests(task: Task, streams: int, args: argparse.Namespace) -> int:
    wanted = streams * args.per_stream
    return max(wanted, task.min_requests) if args.min_requests else wanted


def measure_run(contender: Contender, task: Task, plan: RunPlan, streams: int,
                args: argparse.Namespace) -> tuple[dict, dict[str, list[float]]]:
    """One fresh server's run: its warm-up (1 stream, WARMUP_MAX_TOKENS, not counted),
    then the measured requests; the whole-request figures and drafted / accepted tokens."""
    if plan.warmup:
        cap = min(args.max_tokens_cap or WARMUP_MAX_TOKENS, WARMUP_MAX_TOKENS)
        run_load(contender.endpoint.target, body_maker(task, contender, plan.warmup, cap), 1,
                 requests=len(plan.warmup))
    before = contender.endpoint.metrics()                  # {} for a foreign server
    result = run_load(contender.endpoint.target,
                      body_maker(task, contender, plan.measured, args.max_tokens_cap),
                      streams, requests=len(plan.measured))
    drafts = spec_delta(before, contender.endpoint.metrics()) if not contender.foreign else {}
    return whole_requests(result), drafts


def measure_cell(task: Task, streams: int, args: argparse.Namespace, parallel: int) -> dict:
    """The cell's alternating runs, each server fresh for each run and sent the same plan:
    every contender's per-run figures and, for ours, the drafted / accepted tokens."""
    plan = run_plan(task, cell_requests(task, streams, args), args.warmup_requests)
    names = contender_names(args)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    drafts: dict[str, dict[str, list[float]]] = {name: {} for name in names if name != LLAMA}
    for _ in range(args.runs):
        for name in names:
            with fresh(name, args, parallel) as contender:
                figures, by_source = measure_run(contender, task, plan, streams, args)
            runs[name].append(figures)
            for source, (d, a) in by_source.items():
                total = drafts[name].setdefault(source, [0.0, 0.0])
                total[0] += d
                total[1] += a
    return summarize_cell(task.name, streams, len(plan.measured), runs, drafts)


def summarize_cell(task: str, streams: int, count: int, runs: dict[str, list[dict]],
                   drafts: dict[str, dict[str, list[float]]]) -> dict:
    """The cell's row: median tok/s per server, the ratios, acceptance of the "on" server."""
    row: dict = {"task": task, "streams": streams, "requests_per_run": count}
    for name, figures in runs.items():
        row[name] = {"tok_s_median": statistics.median(f["tok_s"] for f in figures),
                     "failed": sum(f["requests_failed"] for f in figures),
                     "resent": sum(f.get("requests_resent", 0) for f in figures),
                     "runs": figures}
    med = {name: row[name]["tok_s_median"] for name in runs}
    if med.get(OFF) and ON in med:
        row["on_over_off"] = round(med[ON] / med[OFF], 3)
    if med.get(LLAMA) and ON in med:
        row["on_over_llama"] = round(med[ON] / med[LLAMA], 3)
    if ON in drafts:
        row["acceptance"] = acceptance(drafts[ON])
        row["drafts_by_source"] = {s: {"drafted": d, "accepted": a}
                                   for s, (d, a) in drafts[ON].items()}
    return row


def table(rows: list[dict]) -> list[str]:
    """task x streams: off tok/s, on tok/s, on/off, acceptance, llama tok/s, ours(on)/llama;
    a server's tok/s marked FAILED_MARK when any of its requests in the cell failed."""
    def cell(row: dict, key: str) -> str:
        value = row.get(key)
        if isinstance(value, dict):
            return f"{value['tok_s_median']:g}" + (FAILED_MARK if value.get("failed") else "")
        return "-" if value is None else f"{value:g}"
    heads = ("task", "streams", "off tok/s", "on tok/s", "on/off", "accept", "llama tok/s",
             "on/llama")
    keys = (OFF, ON, "on_over_off", "acceptance", LLAMA, "on_over_llama")
    lines = [f"{heads[0]:<9}{heads[1]:>8}" + "".join(f"{h:>12}" for h in heads[2:])]
    for r in rows:
        lines.append(f"{r['task']:<9}{r['streams']:>8}" + "".join(f"{cell(r, k):>12}" for k in keys))
    if any(isinstance(v, dict) and v.get("failed") for r in rows for v in r.values()):
        lines.append(f"{FAILED_MARK} that server failed requests in the cell (\"failed\" in its "
                     "JSON line): its figure counts only the requests that ended well")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    everything = tasks()
    chosen = [everything[name] for name in args.tasks.split(",")]
    levels = [int(x) for x in args.streams.split(",")]
    for task in chosen:              # every request fixed, and checked, before any server starts
        for streams in levels:
            check_plan(task, run_plan(task, cell_requests(task, streams, args),
                                      args.warmup_requests))
    rows = []
    for task in chosen:
        for streams in levels:
            rows.append(measure_cell(task, streams, args, max(levels)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)     # progress
    print("\n".join(table(rows)))
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
