"""GET /engine/snapshot on the health port: bounded, ids and counts only, live, switchable."""
from __future__ import annotations

import json
import threading

import requests

from engine.api import EngineSnapshot, EngineStats
from engine.core.snapshot import (MAX_SEGMENT_BLOCKS, MAX_SEQ_BLOCKS, MAX_SNAPSHOT_BLOCKS,
                                  MAX_SNAPSHOT_SEGMENTS, MAX_SNAPSHOT_SEQS, MAX_SNAPSHOT_WAITING,
                                  RadixSegment, SeqView, WaitingView)
from server.observe.engine_view import (HISTORY_BUCKETS, MAX_SNAPSHOT_BYTES, HistoryBucket,
                                ViewSnapshot, snapshot_document)
from server.replies import json_bytes
from tests.e2e.helpers import TIMEOUT_S, chat_body, post, running_server
from tests.polling import wait_for

SECRET = "zebra-canary"          # prompt text that must never show in the snapshot


def snapshot(handle) -> dict:
    r = requests.get(handle.health_url + "/engine/snapshot", timeout=TIMEOUT_S)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    return r.json()


def test_snapshot_follows_a_request_and_never_shows_its_text(succ_model_dir):
    with running_server(succ_model_dir, step_delay_s=0.02, engine=_small_pool()) as handle:
        idle = snapshot(handle)
        assert idle["blocks"]["states"] == "f" * 64 and idle["running"] == []
        body = chat_body(SECRET * 3, max_tokens=60, temperature=0)
        worker = threading.Thread(target=post, args=(handle, "/v1/chat/completions", body))
        worker.start()
        busy = wait_for(lambda: (s := snapshot(handle))["running"] and s, TIMEOUT_S)
        assert busy, "the request never showed as running"
        seq = busy["running"][0]
        assert seq["prompt_tokens"] == len(SECRET) * 3 and seq["num_blocks"] >= 3
        assert busy["blocks"]["states"].count("u") == seq["num_blocks"] == len(seq["blocks"])
        assert all(busy["blocks"]["states"][b] == "u" for b in seq["blocks"])
        raw = requests.get(handle.health_url + "/engine/snapshot", timeout=TIMEOUT_S).text
        assert SECRET not in raw and "zebra" not in raw
        worker.join(TIMEOUT_S)
        done = wait_for(lambda: (s := snapshot(handle))["blocks"]["used"] == 0 and s, TIMEOUT_S)
        assert done, "the blocks never came back"
        assert "u" not in done["blocks"]["states"] and done["radix"]       # prompt now cached
        assert done["radix"][0]["refs"][0] == 0
        steps = sum(b["steps"] for b in done["history"])
        assert steps == done["stats"]["steps_total"] >= 60
        assert sum(b["decode_rows"] for b in done["history"]) >= 59


def test_the_engine_view_can_be_turned_off(succ_model_dir):
    with running_server(succ_model_dir, engine_view=False) as handle:
        for path in ("/engine", "/engine/snapshot"):
            r = requests.get(handle.health_url + path, timeout=TIMEOUT_S)
            assert r.status_code == 404, path
            assert r.json()["error"]["code"] == "engine_view_disabled"
            assert "engine_view = false" in r.json()["error"]["message"]
        assert handle.bridge.view is None and not handle.bridge._engine.record_steps


def test_the_document_is_bounded_under_the_caps():
    seqs = tuple(SeqView(10**6 + i, 100, 10**5, 10**5, 10**5, 10**5,
                         tuple(range(10**5, 10**5 + MAX_SEQ_BLOCKS))) for i in range(MAX_SNAPSHOT_SEQS))
    waiting = tuple(WaitingView(10**6 + i, -100, 10**5, 10**5) for i in range(MAX_SNAPSHOT_WAITING))
    segments = tuple(RadixSegment(10**5 + i, 10**5 + i - 1, 10**4,
                                  tuple(range(10**5, 10**5 + MAX_SEGMENT_BLOCKS)),
                                  (999,) * MAX_SEGMENT_BLOCKS) for i in range(MAX_SNAPSHOT_SEGMENTS))
    snap = EngineSnapshot(num_blocks=10**6, block_size=16, block_states="s" * MAX_SNAPSHOT_BLOCKS,
                          running=seqs, waiting=waiting, radix=segments, num_running=10**6,
                          num_waiting=10**6, num_radix_nodes=10**6)
    history = tuple(HistoryBucket(start_s=i * 0.5, steps=10**6, batch_tokens=10**9,
                                  prefill_rows=10**6, decode_rows=10**6, drafted_rows=10**6,
                                  accepted_rows=10**6, preemptions=10**6,
                                  prompt_tokens=10**9, prefix_hit_tokens=10**8)
                    for i in range(HISTORY_BUCKETS + 1))
    document = snapshot_document(ViewSnapshot(10**6, snap, EngineStats(), history))
    size = len(json_bytes(document))
    assert 100_000 < size <= MAX_SNAPSHOT_BYTES, size
    assert json.loads(json_bytes(document))["num_running"] == 10**6


def _small_pool():
    from engine.api import EngineConfig
    return EngineConfig(num_kv_blocks=64, block_size=16)


class FakeEngine:
    """What EngineView reads: last_step, has_work(), snapshot() (counted)."""

    def __init__(self):
        self.last_step, self.busy, self.snapshots = None, True, 0

    def has_work(self) -> bool:
        return self.busy

    def snapshot(self):
        self.snapshots += 1
        return self.snapshots


def test_a_busy_engine_builds_snapshots_only_while_someone_looks():
    from server.observe.engine_view import PUBLISH_INTERVAL_S, VIEWER_GONE_S, EngineView
    now = [1000.0]
    engine, view = FakeEngine(), EngineView(clock=lambda: now[0])
    view.update(engine, EngineStats(), stepped=False)              # the first picture
    assert engine.snapshots == 1
    for _ in range(50):                                           # busy, nobody looking
        now[0] += PUBLISH_INTERVAL_S
        view.update(engine, EngineStats(steps_total=1), stepped=True)
    assert engine.snapshots == 1
    view.asked()
    now[0] += PUBLISH_INTERVAL_S
    view.update(engine, EngineStats(), stepped=True)
    view.update(engine, EngineStats(), stepped=True)              # throttled: same instant
    assert engine.snapshots == 2 and view.latest.engine == 2
    now[0] += VIEWER_GONE_S + 1
    view.update(engine, EngineStats(), stepped=True)              # the viewer left
    engine.busy = False
    view.update(engine, EngineStats(), stepped=True)              # idle: the final state
    assert engine.snapshots == 3


def documented_snapshot_schema() -> dict:
    """openapi.yaml's EngineSnapshot: where the document's fields are written down."""
    import yaml
    from tests.oracle import REPO_ROOT
    return yaml.safe_load((REPO_ROOT / "openapi.yaml").read_text(encoding="utf-8"))["components"]["schemas"][
        "EngineSnapshot"]


def _busy_engine_view() -> ViewSnapshot:
    """A real engine with one cached prefix (radix), one running and one waiting sequence."""
    from engine.api import EngineConfig, GenRequest, SamplingParams
    from engine.core.engine import Engine
    from server.observe.engine_view import EngineView
    from tests.engine.core.engine_models import run_to_completion, succ_model
    greedy = SamplingParams(temperature=0.0)
    engine = Engine(succ_model(), EngineConfig(block_size=4, num_kv_blocks=64, max_num_seqs=1,
                                               prefix_cache="radix"))
    engine.record_steps = True
    engine.add_request(GenRequest(prompt=tuple(range(97, 109)), params=greedy, max_tokens=2))
    run_to_completion(engine)                            # its 12-token prompt stays cached
    for first in (40, 60):                               # max_num_seqs=1: one runs, one waits
        engine.add_request(GenRequest(prompt=tuple(range(first, first + 9)), params=greedy,
                                      max_tokens=8))
    engine.step()
    view = EngineView(clock=lambda: 100.0)
    view.asked()                                         # someone looks: a busy engine publishes
    view.update(engine, engine.stats(), stepped=True)
    return view.latest


def test_the_snapshot_carries_exactly_its_documented_fields():
    """Each entry (running, waiting, radix, history) has exactly the fields openapi.yaml lists:
    a field added to SeqView, WaitingView or RadixSegment (say the prompt's token ids) would
    reach the page through asdict() unless someone documents it here first."""
    import jsonschema
    schema = documented_snapshot_schema()
    document = json.loads(json_bytes(snapshot_document(_busy_engine_view())))
    fields = schema["properties"]
    assert set(document) == set(fields)
    for part in ("blocks", "stats"):
        assert set(document[part]) == set(fields[part]["properties"]), part
    for part in ("running", "waiting", "radix", "history"):
        assert document[part], f"no {part} entry to check"
        documented_keys = set(fields[part]["items"]["properties"])
        for entry in document[part]:
            assert set(entry) == documented_keys, (part, entry)
    jsonschema.validate(document, schema)


def test_the_history_sums_drafted_and_accepted_rows():
    from engine.core.snapshot import StepRecord, StepRow
    from server.observe.engine_view import EngineView
    engine, view = FakeEngine(), EngineView(clock=lambda: 100.0)
    view.asked()
    for drafted, accepted in ((4, 4), (6, 1), (0, 0)):
        engine.last_step = StepRecord(1, 100.0, 100.0, 100.0, 100.0, preempted=(),
                                      rows=(StepRow(0, 1, False, drafted, accepted), StepRow(1, 3, True)))
        view.update(engine, EngineStats(), stepped=True)
    engine.busy = False
    view.update(engine, EngineStats(), stepped=False)
    (bucket,) = view.latest.history
    assert (bucket.drafted_rows, bucket.accepted_rows, bucket.decode_rows) == (10, 5, 3)
