"""The engine view's data: a bounded, read-only snapshot the health port serves as JSON.

The engine thread builds it, never the loop thread: after each pass of its loop the bridge
calls `EngineView.update(engine, stats, stepped)`, which folds the last `StepRecord` into a
minute of history (`HISTORY_BUCKETS` buckets of `HISTORY_BUCKET_S`) and, at most every
`PUBLISH_INTERVAL_S` (and always when the engine goes idle), publishes a new frozen
`ViewSnapshot` by replacing one attribute -- the same way the bridge publishes `stats`.
The loop thread only reads `latest` and renders it (`snapshot_document`), and marks that
someone is looking (`asked`): while nobody has looked for `VIEWER_GONE_S`, a busy engine
builds no snapshot at all (the history, a few additions per step, is always kept).

What is in it: block states, ids, counts, priorities and block numbers (engine/core/
snapshot.py). Never prompt or output text, never token ids: those belong to other users.
Every list is capped, so the document stays under `MAX_SNAPSHOT_BYTES` whatever the load.
Its fields are exactly those of openapi.yaml's `EngineSnapshot` (a test holds them to it):
a field added to a view dataclass reaches the page through `asdict`, so document it first.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Callable

from engine.api import Engine, EngineSnapshot, EngineStats, StepRecord
from server.worker.encoder_thread import EncoderStats

HISTORY_BUCKET_S = 0.5              # one plot point per half second
HISTORY_BUCKETS = 120               # ... for the last minute
PUBLISH_INTERVAL_S = 0.1            # snapshots while busy: 10 a second (the page polls 4)
VIEWER_GONE_S = 2.0                 # no snapshot asked for this long: build none while busy
MAX_SNAPSHOT_BYTES = 512 * 1024     # the JSON document's bound under the snapshot caps


@dataclass(frozen=True, slots=True)
class HistoryBucket:
    """What the engine did during one HISTORY_BUCKET_S."""
    start_s: float                  # engine clock
    steps: int = 0
    batch_tokens: int = 0           # summed over the steps
    prefill_rows: int = 0
    decode_rows: int = 0
    drafted_rows: int = 0           # speculative draft rows verified
    accepted_rows: int = 0          # ... of which the model produced
    preemptions: int = 0
    prompt_tokens: int = 0          # prompt tokens scheduled for the first time
    prefix_hit_tokens: int = 0      # ... of which came from the prefix cache


@dataclass(frozen=True, slots=True)
class ViewSnapshot:
    taken_s: float
    engine: EngineSnapshot
    stats: EngineStats
    history: tuple[HistoryBucket, ...]


class EngineView:
    """Engine-thread side: history and publishing. `latest` is read by the loop thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._history: deque[HistoryBucket] = deque(maxlen=HISTORY_BUCKETS)
        self._current = HistoryBucket(start_s=self._bucket_start(clock()))
        self._last_stats = EngineStats()
        self._published_s = float("-inf")
        self._asked_s = float("-inf")               # written by the loop thread (one float)
        self.latest: ViewSnapshot | None = None

    def _bucket_start(self, now_s: float) -> float:
        return now_s - now_s % HISTORY_BUCKET_S

    def update(self, engine: Engine, stats: EngineStats, stepped: bool) -> None:
        now_s = self._clock()
        self._roll(now_s)
        if stepped:
            self._count(engine.last_step, stats)
        self._last_stats = stats
        busy = stepped and engine.has_work()           # idle: always show the final state
        unwatched = now_s - self._asked_s > VIEWER_GONE_S
        if busy and (unwatched or now_s - self._published_s < PUBLISH_INTERVAL_S):
            return
        self._published_s = now_s
        self.latest = ViewSnapshot(now_s, engine.snapshot(), stats,
                                   tuple(self._history) + (self._current,))

    def asked(self) -> None:
        """Loop thread: a viewer fetched a snapshot (keeps fresh ones coming while busy)."""
        self._asked_s = self._clock()

    def _roll(self, now_s: float) -> None:
        start_s = self._bucket_start(now_s)
        if start_s > self._current.start_s:
            self._history.append(self._current)
            self._current = HistoryBucket(start_s=start_s)

    def _count(self, record: StepRecord | None, stats: EngineStats) -> None:
        c, last = self._current, self._last_stats
        rows = (record.batch_tokens, record.prefill_rows, record.decode_rows, record.drafted_rows,
                record.accepted_rows) if record else (0, 0, 0, 0, 0)
        self._current = HistoryBucket(
            start_s=c.start_s, steps=c.steps + (record is not None),
            batch_tokens=c.batch_tokens + rows[0], prefill_rows=c.prefill_rows + rows[1],
            decode_rows=c.decode_rows + rows[2], drafted_rows=c.drafted_rows + rows[3],
            accepted_rows=c.accepted_rows + rows[4],
            preemptions=c.preemptions + stats.preemptions_total - last.preemptions_total,
            prompt_tokens=c.prompt_tokens + stats.prompt_tokens - last.prompt_tokens,
            prefix_hit_tokens=c.prefix_hit_tokens + stats.prefix_hit_tokens - last.prefix_hit_tokens)


def snapshot_document(view: ViewSnapshot | None, model: str | None = None,
                      encoders: tuple[dict, ...] = (), engines: tuple[str, ...] = ()) -> dict:
    """The JSON document of GET /engine/snapshot (ages in seconds, newest history last):
    the chat engine `model`'s picture, every chat engine's id (`engines`) and each
    encoder's part (`encoder_document`); a server of embedding models only (no chat
    engine: `view` None) has just the latter."""
    if view is None:
        return {"object": "engine.snapshot", "model": None, "engines": list(engines),
                "encoders": list(encoders)}
    snap, stats = view.engine, view.stats
    return {
        "object": "engine.snapshot", "model": model, "engines": list(engines),
        "encoders": list(encoders),
        "blocks": {"num_blocks": snap.num_blocks, "block_size": snap.block_size,
                   "states": snap.block_states, "used": stats.kv_blocks_used,
                   "cached": stats.kv_blocks_cached, "free": stats.kv_blocks_free},
        "running": [asdict(s) for s in snap.running],
        "num_running": snap.num_running,
        "waiting": [asdict(s) for s in snap.waiting],
        "num_waiting": snap.num_waiting,
        "radix": [dict(asdict(s), tokens=s.num_blocks * snap.block_size) for s in snap.radix],
        "num_radix_nodes": snap.num_radix_nodes,
        "stats": {"batch_tokens": stats.batch_tokens, "steps_total": stats.steps_total,
                  "preemptions_total": stats.preemptions_total,
                  "evictions_total": stats.evictions_total,
                  "prefix_hit_ratio": round(stats.prefix_hit_ratio, 4),
                  "lora_merged_adapter": stats.lora_merged_adapter,
                  "lora_merged_bytes": stats.lora_merged_bytes},
        "history_bucket_s": HISTORY_BUCKET_S,
        "history": [_bucket_document(b, view.taken_s) for b in view.history],
    }


def encoder_document(model: str, stats: EncoderStats, max_batch_tokens: int) -> dict:
    """One sentence-embedding model's part of the snapshot: its queue and counters."""
    return {"model": model, "max_batch_tokens": max_batch_tokens, **asdict(stats)}


def _bucket_document(b: HistoryBucket, taken_s: float) -> dict:
    return {"age_s": round(taken_s - b.start_s, 3), "steps": b.steps,
            "tokens_per_step": round(b.batch_tokens / b.steps, 2) if b.steps else 0,
            "prefill_rows": b.prefill_rows, "decode_rows": b.decode_rows,
            "drafted_rows": b.drafted_rows, "accepted_rows": b.accepted_rows,
            "preemptions": b.preemptions,
            "prefix_hit_ratio": (round(b.prefix_hit_tokens / b.prompt_tokens, 4)
                                 if b.prompt_tokens else None)}
