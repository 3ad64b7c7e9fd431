"""Heavy requests are prepared off the loop thread (server/offloop/pool.py), over real sockets.

The heavy request is the Zod integer schema (bench/loop_stall.py's): its grammar takes seconds to
compile (or to refuse as too large) — on the loop thread that stopped every stream and
every health probe for as long. The timing test runs the server in a child process (as
production does), so the test's own client threads do not share the server's GIL."""
from __future__ import annotations

import gc
import threading
import time

import pytest
import requests

from tests.e2e.helpers import TIMEOUT_S, chat_body, child_server, metrics, post, running_server

ZOD_INT = {"type": "object", "properties": {"n": {"type": "integer",
                                                  "minimum": -9007199254740991,
                                                  "maximum": 9007199254740991}},
           "required": ["n"]}
HEALTH_MAX_S = 0.1             # /healthz, /readyz, /metrics while the grammar compiles
STREAM_GAP_MAX_S = 0.5         # a running stream's largest gap meanwhile (steps are ~10 ms)
STEP_DELAY_S = 0.01


def zod_body() -> dict:
    return chat_body("a", max_tokens=4, response_format={
        "type": "json_schema", "json_schema": {"name": "zod", "schema": ZOD_INT}})


class StreamClock:
    """Reads a streamed chat on a thread, noting when each SSE line arrived."""

    def __init__(self, server):
        self.arrivals_s: list[float] = []
        self.started = threading.Event()
        self.stop = threading.Event()
        body = chat_body("a", max_tokens=1000, temperature=0, stream=True, ignore_eos=True)
        self.thread = threading.Thread(target=self._read, args=(server, body), daemon=True)
        self.thread.start()

    def _read(self, server, body):
        with requests.post(server.http_url + "/v1/chat/completions", json=body, stream=True,
                           timeout=TIMEOUT_S) as r:
            for line in r.iter_lines():
                if line:
                    self.arrivals_s.append(time.monotonic())
                    self.started.set()
                if self.stop.is_set():
                    return

    def largest_gap_s(self, start_s: float, end_s: float) -> tuple[float, int]:
        """The largest gap between arrivals that touches [start_s, end_s], and how many
        arrived inside it."""
        times = list(self.arrivals_s)
        inside = [t for t in times if start_s <= t <= end_s]
        before = [t for t in times if t < start_s][-1:]
        after = [t for t in times if t > end_s][:1]
        edges = before + inside + after
        gaps = [b - a for a, b in zip(edges, edges[1:])]
        return max(gaps, default=end_s - start_s), len(inside)


@pytest.mark.timing
def test_health_and_streams_keep_going_while_a_grammar_compiles(succ_model_dir):
    with child_server(succ_model_dir, "--config", "runtime.toml",
                      step_delay_s=STEP_DELAY_S) as server:
        stream = StreamClock(server)
        assert stream.started.wait(TIMEOUT_S)
        answer: dict = {}
        heavy = threading.Thread(target=lambda: answer.update(r=post(
            server, "/v1/chat/completions", zod_body())))
        start_s = time.monotonic()
        gc.disable()                    # this process's own collections are not the server's
        try:
            heavy.start()
            probes_s = []
            while heavy.is_alive():
                for path in ("/healthz", "/readyz", "/metrics"):
                    sent_s = time.monotonic()
                    r = requests.get(server.health_url + path, timeout=TIMEOUT_S)
                    probes_s.append(time.monotonic() - sent_s)
                    assert r.status_code == 200
        finally:
            gc.enable()
        end_s = time.monotonic()
        heavy.join()
        gap_s, tokens = stream.largest_gap_s(start_s, end_s)
        stream.stop.set()
        stream.thread.join(TIMEOUT_S)           # it leaves at its next line
        assert answer["r"].status_code in (200, 400)       # compiled, or refused as too large
        assert probes_s and max(probes_s) < HEALTH_MAX_S, (max(probes_s), end_s - start_s)
        assert tokens > 0 and gap_s < STREAM_GAP_MAX_S, (gap_s, tokens, end_s - start_s)
        assert metrics(server)["tl_loop_stall_seconds_max"] < HEALTH_MAX_S


class SpyPool:
    """The server's off-loop pool, with an event set when a prepare is handed to it and the
    threads its work ran on."""

    def __init__(self, pool):
        self.pool, self.handed = pool, threading.Event()
        self.ran_on: list[threading.Thread] = []

    def run(self, work, then):
        def noted():
            self.ran_on.append(threading.current_thread())
            return work()
        stream = self.pool.run(noted, then)
        self.handed.set()
        return stream


def test_a_request_being_prepared_when_the_drain_starts_is_still_answered(succ_model_dir):
    with running_server(succ_model_dir) as server:
        spy = server.api.inner.offloop = SpyPool(server.api.inner.offloop)
        answer: dict = {}
        heavy = threading.Thread(target=lambda: answer.update(r=post(
            server, "/v1/chat/completions", zod_body())))
        heavy.start()
        assert spy.handed.wait(TIMEOUT_S)
        server.drain()
        heavy.join(TIMEOUT_S)
        r = answer["r"]
        assert r.status_code in (200, 400) and r.json().get("error", {}).get("code") != \
            "shutting_down"
        assert server.join(TIMEOUT_S) == 0                 # then the drain completes
        assert spy.ran_on and not any(t.is_alive() for t in spy.ran_on)   # the pool stops too
