"""Heavy requests are prepared off the loop thread (server/offloop/pool.py), over real sockets.

The heavy request is the Zod integer schema (bench/loop_stall.py's): its grammar takes seconds to
compile (or to refuse as too large) — on the loop thread that stopped every stream and
every health probe for as long. Here the compile is held on an event until the test has
seen the probes answered and the stream go on, so "while it compiles" needs no clock
(bench/serving_stalls.py times the probes and the stream's gaps)."""
from __future__ import annotations

import threading

import requests

from tests.e2e.helpers import TIMEOUT_S, chat_body, post, running_server

ZOD_INT = {"type": "object", "properties": {"n": {"type": "integer",
                                                  "minimum": -9007199254740991,
                                                  "maximum": 9007199254740991}},
           "required": ["n"]}
STEP_DELAY_S = 0.01
TOKENS_MEANWHILE = 5           # stream lines the test waits for while the compile is held


def zod_body() -> dict:
    return chat_body("a", max_tokens=4, response_format={
        "type": "json_schema", "json_schema": {"name": "zod", "schema": ZOD_INT}})


class HeldCompiles:
    """A served model's grammar cache whose `get` waits for `release` (the test's), noting
    the thread it was called on: while held, a compile is in progress for as long as the
    test needs."""

    def __init__(self, cache):
        self.cache = cache
        self.entered, self.release = threading.Event(), threading.Event()
        self.called_on: list[threading.Thread] = []

    def get(self, spec):
        self.called_on.append(threading.current_thread())
        self.entered.set()
        if not self.release.wait(TIMEOUT_S):
            raise AssertionError(f"the held compile was not released within {TIMEOUT_S} s")
        return self.cache.get(spec)


class StreamCount:
    """Reads a streamed chat on a thread, counting its SSE lines; `wait_for(n)` returns
    whether n have arrived (False: not within TIMEOUT_S)."""

    def __init__(self, server):
        self.lines = 0
        self._arrived = threading.Condition()
        self._stop = threading.Event()
        body = chat_body("a", max_tokens=1000, temperature=0, stream=True, ignore_eos=True)
        self.thread = threading.Thread(target=self._read, args=(server, body), daemon=True)
        self.thread.start()

    def _read(self, server, body):
        with requests.post(server.http_url + "/v1/chat/completions", json=body, stream=True,
                           timeout=TIMEOUT_S) as r:
            for line in r.iter_lines():
                if line:
                    with self._arrived:
                        self.lines += 1
                        self._arrived.notify_all()
                if self._stop.is_set():
                    return

    def wait_for(self, lines: int) -> bool:
        with self._arrived:
            return self._arrived.wait_for(lambda: self.lines >= lines, TIMEOUT_S)

    def stop(self) -> None:
        """Leave at the next line (closing the stream ends the chat)."""
        self._stop.set()
        self.thread.join(TIMEOUT_S)


def test_health_and_streams_keep_going_while_a_grammar_compiles(succ_model_dir):
    with running_server(succ_model_dir, step_delay_s=STEP_DELAY_S) as server:
        served = server.models.chats["succ"].served
        held = served.grammars = HeldCompiles(served.grammars)
        stream = StreamCount(server)
        answer: dict = {}
        heavy = threading.Thread(target=lambda: answer.update(r=post(
            server, "/v1/chat/completions", zod_body())))
        assert stream.wait_for(1)
        heavy.start()
        try:
            assert held.entered.wait(TIMEOUT_S)                 # the compile is in progress ...
            assert server.thread not in held.called_on          # ... and not on the loop thread
            for path in ("/healthz", "/readyz", "/metrics"):
                r = requests.get(server.health_url + path, timeout=TIMEOUT_S)
                assert r.status_code == 200, path
            assert stream.wait_for(stream.lines + TOKENS_MEANWHILE)
            assert "r" not in answer                            # still held: no answer yet
        finally:
            held.release.set()
            heavy.join(TIMEOUT_S)
            stream.stop()
        assert answer["r"].status_code in (200, 400)       # compiled, or refused as too large


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
