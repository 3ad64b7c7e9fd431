"""The step trace: Chrome trace-event JSON (Perfetto, chrome://tracing) of the engine at work.

`--trace-file PATH` (or `[engine].trace_file`) makes the bridge feed a `TraceWriter` on the
engine thread. Two processes appear in the viewer:

    engine    one track "steps": a span per engine step (args: batch composition, and its
              speculative rows: drafted, and accepted by the model) with three nested
              spans, schedule | forward | sample, from the step's StepRecord
    requests  one track per request: queued -> prefill chunk(s) -> decode -> finish
              (a preempted request shows "preempted" and queues again); a decode span
              counts its rows, drafted rows among them, and the drafts accepted

The file is the JSON Array Format: "[", events separated by ",\n", and "]" when the
server stops, so a finished trace is valid JSON (and an unfinished one still opens in
both viewers). It is bounded: once `max_bytes` would be passed, one last event says so
(and the log says it once), the array is closed, and nothing more is written.

When the trace is off there is no writer at all: the bridge tests one attribute per step.
Timestamps are microseconds since the writer started, on the engine's clock.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from engine.api import StepRecord, StepRow, TokenOut

log = logging.getLogger("tlserve.trace")

ENGINE_PID, REQUESTS_PID = 1, 2
STEPS_TID = 1
US_PER_S = 1_000_000
CLOSING_RESERVE_BYTES = 1024         # room kept for the cap message and the closing bracket


@dataclass(slots=True)
class _Track:
    """A request's open spans (engine-clock seconds)."""
    tid: int
    waiting_since_s: float | None     # queued (or re-queued after a preemption) since
    decode_start_s: float | None = None
    decode_end_s: float = 0.0
    decode_tokens: int = 0            # rows computed while decoding (drafts included)
    decode_drafted: int = 0
    decode_accepted: int = 0
    requeued: bool = False


class TraceWriter:
    """Writes trace events to `path`; every method runs on the engine thread."""

    def __init__(self, path: str, max_bytes: int, origin_s: float):
        self.path, self.max_bytes, self._origin_s = path, max_bytes, origin_s
        self._file = open(path, "w", encoding="utf-8")
        self._file.write("[\n")
        self._bytes, self._first, self.is_closed, self.is_capped = 2, True, False, False
        self._tracks: dict[int, _Track] = {}
        self._meta(ENGINE_PID, None, "process_name", "engine")
        self._meta(ENGINE_PID, STEPS_TID, "thread_name", "steps")
        self._meta(REQUESTS_PID, None, "process_name", "requests")

    # -- what the bridge reports ---------------------------------------------------------

    def queued(self, engine_id: int, request_id: str, now_s: float) -> None:
        tid = engine_id + 1
        self._tracks[engine_id] = _Track(tid, now_s)
        self._meta(REQUESTS_PID, tid, "thread_name", f"request {engine_id}",
                   request_id=request_id)

    def step(self, record: StepRecord | None, outs: list[TokenOut], now_s: float) -> None:
        if record is not None:
            self._step_spans(record)
            for row in record.rows:
                self._row(row, record)
            for seq_id in record.preempted:
                self._preempted(seq_id, record.start_s)
        for out in outs:
            if out.finish is not None:
                self.finished(out.id, out.finish, record.end_s if record else now_s)

    def finished(self, engine_id: int, reason: str, now_s: float) -> None:
        track = self._tracks.pop(engine_id, None)
        if track is None:
            return
        self._close_waiting(track, now_s)
        self._close_decode(track)
        self._instant(REQUESTS_PID, track.tid, "finish", now_s, reason=reason)

    def close(self, now_s: float | None = None) -> None:
        """End open request tracks (the server is stopping) and close the JSON array."""
        for engine_id in list(self._tracks):
            self.finished(engine_id, "server stopped", now_s if now_s is not None else
                          max(t.decode_end_s for t in self._tracks.values()))
        if not self.is_closed:
            self._file.write("\n]\n")
            self._file.close()
            self.is_closed = True

    # -- tracks ----------------------------------------------------------------------------

    def _step_spans(self, r: StepRecord) -> None:
        self._span(ENGINE_PID, STEPS_TID, f"step {r.step}", r.start_s, r.end_s,
                   step=r.step, batch_tokens=r.batch_tokens, prefill_rows=r.prefill_rows,
                   decode_rows=r.decode_rows, drafted_rows=r.drafted_rows,
                   accepted_rows=r.accepted_rows, preempted=len(r.preempted),
                   sequences=[row.seq_id for row in r.rows])
        self._span(ENGINE_PID, STEPS_TID, "schedule", r.start_s, r.scheduled_s)
        self._span(ENGINE_PID, STEPS_TID, "forward", r.scheduled_s, r.forward_s,
                   rows=r.batch_tokens)
        self._span(ENGINE_PID, STEPS_TID, "sample", r.forward_s, r.end_s)

    def _row(self, row: StepRow, r: StepRecord) -> None:
        track = self._tracks.get(row.seq_id)
        if track is None:
            return
        self._close_waiting(track, r.start_s)
        num_tokens = row.num_tokens + row.num_drafts
        if row.is_prefill:
            self._span(REQUESTS_PID, track.tid, "prefill chunk", r.start_s, r.end_s,
                       tokens=num_tokens, step=r.step)
            return
        if track.decode_start_s is None:
            track.decode_start_s = r.start_s
        track.decode_end_s, track.decode_tokens = r.end_s, track.decode_tokens + num_tokens
        track.decode_drafted += row.num_drafts
        track.decode_accepted += row.num_accepted

    def _preempted(self, seq_id: int, now_s: float) -> None:
        track = self._tracks.get(seq_id)
        if track is None:
            return
        self._close_decode(track)
        self._instant(REQUESTS_PID, track.tid, "preempted", now_s)
        track.waiting_since_s, track.requeued = now_s, True

    def _close_waiting(self, track: _Track, now_s: float) -> None:
        if track.waiting_since_s is not None:
            name = "queued again" if track.requeued else "queued"
            self._span(REQUESTS_PID, track.tid, name, track.waiting_since_s, now_s)
            track.waiting_since_s = None

    def _close_decode(self, track: _Track) -> None:
        if track.decode_start_s is not None:
            self._span(REQUESTS_PID, track.tid, "decode", track.decode_start_s,
                       track.decode_end_s, tokens=track.decode_tokens,
                       drafted=track.decode_drafted, accepted=track.decode_accepted)
            track.decode_start_s, track.decode_tokens = None, 0
            track.decode_drafted = track.decode_accepted = 0

    # -- events ----------------------------------------------------------------------------

    def _us(self, t_s: float) -> float:
        return round((t_s - self._origin_s) * US_PER_S, 1)

    def _span(self, pid: int, tid: int, name: str, start_s: float, end_s: float,
              **args) -> None:
        start_us = self._us(start_s)
        self._emit({"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": start_us,
                    "dur": max(round(self._us(end_s) - start_us, 1), 0.0), "args": args})

    def _instant(self, pid: int, tid: int, name: str, t_s: float, **args) -> None:
        self._emit({"ph": "i", "s": "t", "pid": pid, "tid": tid, "name": name,
                    "ts": self._us(t_s), "args": args})

    def _meta(self, pid: int, tid: int | None, kind: str, name: str, **args) -> None:
        event = {"ph": "M", "pid": pid, "name": kind, "args": {"name": name, **args}}
        if tid is not None:
            event["tid"] = tid
        self._emit(event)

    def _emit(self, event: dict) -> None:
        if self.is_closed:
            return
        text = ("" if self._first else ",\n") + json.dumps(event, separators=(",", ":"))
        if self._bytes + len(text) + CLOSING_RESERVE_BYTES > self.max_bytes:
            self._stop_at_cap(event.get("ts", 0.0))
            return
        self._file.write(text)
        self._bytes += len(text)
        self._first = False

    def _stop_at_cap(self, ts_us: float) -> None:
        message = (f"tl-serve stopped writing this trace at its size cap of {self.max_bytes} "
                   f"bytes ([engine].trace_max_mib); later events are not recorded")
        log.warning("trace file %s: %s", self.path, message)
        self._file.write(("" if self._first else ",\n") + json.dumps(
            {"ph": "i", "s": "g", "pid": ENGINE_PID, "tid": STEPS_TID, "ts": ts_us,
             "name": "trace stopped: size cap reached", "args": {"message": message}},
            separators=(",", ":")))
        self.is_capped = True
        self.close()
