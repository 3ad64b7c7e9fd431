"""The step trace: Chrome trace-event JSON that Perfetto and chrome://tracing open."""
from __future__ import annotations

import json
import logging

from engine.api import EngineConfig, StepRecord, TokenOut
from engine.core.snapshot import StepRow
from server.observe.trace import TraceWriter
from tests.e2e.helpers import TIMEOUT_S, chat_body, metrics, open_stream, post, running_server
from tests.polling import wait_for

EPS_US = 0.25                   # timestamps are rounded to 0.1 us


def events_of(path) -> list[dict]:
    events = json.loads(path.read_text())          # valid JSON: the server closed the array
    assert isinstance(events, list) and events
    return events


def tracks(events) -> dict[tuple[int, int], list[dict]]:
    out: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        if e["ph"] in ("X", "i"):
            out.setdefault((e["pid"], e["tid"]), []).append(e)
    return out


def check_nested_and_monotonic(events) -> None:
    for key, track in tracks(events).items():
        stamps = [e["ts"] for e in track]
        assert stamps == sorted(stamps), f"track {key} goes back in time"
    steps = [e for e in events if e["pid"] == 1 and e["ph"] == "X"]
    step = None
    for e in steps:
        if e["name"].startswith("step "):
            step = e
            continue
        assert e["name"] in ("schedule", "forward", "sample")
        assert step["ts"] - EPS_US <= e["ts"] and \
            e["ts"] + e["dur"] <= step["ts"] + step["dur"] + EPS_US, (step, e)


def test_a_served_trace_has_steps_with_phases_and_one_track_per_request(succ_model_dir, tmp_path):
    path = tmp_path / "trace.json"
    engine = EngineConfig(num_kv_blocks=64, block_size=4, prefill_chunk=8)
    with running_server(succ_model_dir, trace_file=str(path), engine=engine,
                        step_delay_s=0.002) as handle:
        r = post(handle, "/v1/chat/completions", chat_body("a" * 20, max_tokens=5, temperature=0))
        assert r.status_code == 200
        sock, _ = open_stream(handle, chat_body("b" * 3, max_tokens=200, stream=True))  # fits the pool
        sock.close()                                   # the client leaves: the server aborts
        assert wait_for(lambda: metrics(handle)['tl_engine_kv_blocks{state="used"}'] == 0,
                        TIMEOUT_S)
    events = events_of(path)
    check_nested_and_monotonic(events)
    step_spans = [e for e in events if e["name"].startswith("step ")]
    assert len(step_spans) >= 5
    args = step_spans[0]["args"]
    assert args["batch_tokens"] == 8 and args["prefill_rows"] == 1 and args["decode_rows"] == 0
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"engine", "steps", "requests", "request 0", "request 1"} <= names
    by_track = tracks(events)
    first = [e["name"] for e in by_track[(2, 1)]]
    assert first == ["queued", "prefill chunk", "prefill chunk", "prefill chunk", "decode", "finish"]
    assert [e["args"]["tokens"] for e in by_track[(2, 1)][1:4]] == [8, 8, 4]
    assert by_track[(2, 1)][4]["args"]["tokens"] == 4          # 1 sampled by the prefill + 4
    assert by_track[(2, 1)][-1]["args"]["reason"] == "length"
    second = by_track[(2, 2)]
    assert second[0]["name"] == "queued" and second[-1]["name"] == "finish"
    assert second[-1]["args"]["reason"] == "aborted"


def record(step: int, t: float, rows, preempted=()) -> StepRecord:
    return StepRecord(step, t, t + 0.001, t + 0.002, t + 0.003, rows=tuple(rows),
                      preempted=tuple(preempted))


def test_a_preempted_request_queues_again_and_the_cap_ends_the_file_clearly(tmp_path, caplog):
    path = tmp_path / "t.json"
    trace = TraceWriter(str(path), max_bytes=1 << 20, origin_s=100.0)
    trace.queued(0, "req-a", 100.0)
    trace.step(record(1, 100.01, [StepRow(0, 4, True)]), [TokenOut(id=0, token=5)], 100.02)
    trace.step(record(2, 100.02, [StepRow(0, 1, False)]), [TokenOut(id=0, token=6)], 100.03)
    trace.step(record(3, 100.03, [], preempted=[0]), [], 100.04)
    trace.step(record(4, 100.04, [StepRow(0, 6, True)]), [TokenOut(id=0, token=7)], 100.05)
    trace.step(record(5, 100.05, [StepRow(0, 1, False)]),
               [TokenOut(id=0, token=8, finish="stop")], 100.06)
    trace.close()
    events = events_of(path)
    check_nested_and_monotonic(events)
    assert [e["name"] for e in tracks(events)[(2, 1)]] == [
        "queued", "prefill chunk", "decode", "preempted", "queued again", "prefill chunk",
        "decode", "finish"]
    assert events[-1]["args"]["reason"] == "stop" and events[-1]["ts"] == 53000.0

    stopped = tmp_path / "stopped.json"
    trace = TraceWriter(str(stopped), max_bytes=1 << 20, origin_s=0.0)
    trace.queued(3, "req-b", 0.5)
    trace.close(now_s=2.0)                           # the server stops with it still queued
    assert [(e["name"], e["ts"]) for e in tracks(events_of(stopped))[(2, 4)]] == [
        ("queued", 500000.0), ("finish", 2000000.0)]
    assert events_of(stopped)[-1]["args"]["reason"] == "server stopped"

    capped = tmp_path / "capped.json"
    cap_bytes = 8 * 1024
    trace = TraceWriter(str(capped), max_bytes=cap_bytes, origin_s=0.0)
    with caplog.at_level(logging.WARNING, logger="tlserve.trace"):
        for i in range(200):
            trace.step(record(i + 1, i * 0.01, [StepRow(0, 1, False)]), [], i * 0.01)
    assert trace.is_capped and trace.is_closed
    assert capped.stat().st_size <= cap_bytes
    events = events_of(capped)
    assert events[-1]["name"] == "trace stopped: size cap reached"
    assert str(cap_bytes) in events[-1]["args"]["message"]
    assert sum("size cap" in r.getMessage() for r in caplog.records) == 1
    check_nested_and_monotonic(events[:-1])


def test_steps_and_decode_spans_show_drafted_and_accepted_rows(tmp_path):
    path = tmp_path / "drafts.json"
    trace = TraceWriter(str(path), max_bytes=1 << 20, origin_s=0.0)
    trace.queued(0, "req-a", 0.0)
    trace.step(record(1, 0.01, [StepRow(0, 1, False, num_drafts=5, num_accepted=3)]), [], 0.02)
    trace.step(record(2, 0.02, [StepRow(0, 1, False, num_drafts=2, num_accepted=0)]),
               [TokenOut(id=0, token=9, finish="stop")], 0.03)
    trace.close()
    events = events_of(path)
    steps = [e["args"] for e in events if e["name"].startswith("step ")]
    assert [(s["drafted_rows"], s["accepted_rows"]) for s in steps] == [(5, 3), (2, 0)]
    (decode,) = [e for e in events if e["name"] == "decode"]
    assert decode["args"] == {"tokens": 9, "drafted": 7, "accepted": 3}
