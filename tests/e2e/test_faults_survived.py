"""Faults survived over real sockets: a disconnect storm, SIGTERM under load, an exception
inside an engine step, an engine thread that died. No request ever hangs: every one
ends with its answer or an error the client can read."""
from __future__ import annotations

import json
import re
import signal
import socket
import struct
import threading

import requests

from tests.e2e.helpers import (TIMEOUT_S, chat_body, metrics, open_stream, post,
                               read_until_closed_or, running_server, child_server)
from tests.polling import wait_for

DONE = b"data: [DONE]\n\n"
FREED_WITHIN_STEPS = 10        # clients that left are noticed and aborted within these


def _engine(**fields):
    from engine.api import EngineConfig
    return EngineConfig(**fields)


def long_stream(max_tokens: int) -> dict:
    return chat_body("a", max_tokens=max_tokens, temperature=0, stream=True, ignore_eos=True)


def _idle(server) -> bool:
    m = metrics(server)
    return m["tl_engine_active_sequences"] == 0 and m['tl_engine_kv_blocks{state="used"}'] == 0


def test_disconnect_storm_frees_every_sequence_and_block_within_a_few_steps(succ_model_dir):
    with running_server(succ_model_dir, step_delay_s=0.02,
                        engine=_engine(prefix_cache="none", block_size=4)) as server:
        socks = [open_stream(server, long_stream(500))[0] for _ in range(64)]
        assert metrics(server)["tl_engine_active_sequences"] > 0
        steps_at_cut = metrics(server)["tl_engine_steps_total"]
        for sock in socks:                      # RST, not FIN: linger on, timeout 0
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        assert wait_for(lambda: _idle(server))
        # counted in engine steps, not seconds: a few, not the ~500 the streams had left
        assert metrics(server)["tl_engine_steps_total"] - steps_at_cut <= FREED_WITHIN_STEPS
        assert post(server, "/v1/chat/completions", chat_body("a", max_tokens=2)).ok


class FaultyEngine:
    """Wraps the real Engine (the tests' seam): a step that raises, or a thread killer."""

    def __init__(self, engine):
        self._engine = engine
        self.fail_steps = threading.Event()
        self.kill_thread = threading.Event()

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def step(self):
        if self.fail_steps.is_set():
            self.fail_steps.clear()
            raise RuntimeError("injected step fault")
        return self._engine.step()

    def has_work(self):                         # outside the bridge's per-step guard
        if self.kill_thread.is_set():
            raise RuntimeError("injected engine thread death")
        return self._engine.has_work()


def _faulty_server(succ_model_dir):
    wrapped: list[FaultyEngine] = []

    def wrap(engine):
        wrapped.append(FaultyEngine(engine))
        return wrapped[0]
    return running_server(succ_model_dir, wrap_engine=wrap, step_delay_s=0.05), wrapped


def test_an_engine_step_exception_ends_its_requests_with_500_and_serving_goes_on(succ_model_dir):
    context, wrapped = _faulty_server(succ_model_dir)
    with context as server:
        sock, received = open_stream(server, long_stream(200))
        whole: dict = {}
        thread = threading.Thread(target=lambda: whole.update(r=post(
            server, "/v1/chat/completions", chat_body("b", max_tokens=200, ignore_eos=True))))
        thread.start()
        assert wait_for(lambda: metrics(server)["tl_engine_active_sequences"] == 2)
        wrapped[0].fail_steps.set()
        body = read_until_closed_or(sock, DONE, received)
        sock.close()
        error_event = re.search(rb'data: (\{"error":.*?\})\n\n', body)
        assert error_event and json.loads(error_event.group(1))["error"]["type"] == "server_error"
        assert DONE in body[error_event.end():]                 # then [DONE], nothing hangs
        thread.join(TIMEOUT_S)
        assert whole["r"].status_code == 500
        assert whole["r"].json()["error"]["type"] == "server_error"
        assert wait_for(lambda: _idle(server))
        after = post(server, "/v1/chat/completions", chat_body("a", max_tokens=3))
        assert after.status_code == 200
        assert requests.get(server.health_url + "/healthz", timeout=TIMEOUT_S).status_code == 200


def test_a_dead_engine_thread_fails_healthz_and_no_request_hangs(succ_model_dir):
    context, wrapped = _faulty_server(succ_model_dir)
    with context as server:
        sock, received = open_stream(server, long_stream(200))
        wrapped[0].kill_thread.set()
        body = read_until_closed_or(sock, DONE, received)
        sock.close()
        assert b'"server_error"' in body and DONE in body
        health = requests.get(server.health_url + "/healthz", timeout=TIMEOUT_S)
        assert health.status_code == 503
        assert health.json()["error"]["code"] == "engine_unavailable"
        refused = post(server, "/v1/chat/completions", chat_body("a", max_tokens=2))
        assert refused.status_code == 503                  # refused, not queued for a dead engine
        assert refused.json()["error"]["code"] == "engine_unavailable"


def test_sigterm_with_48_streams_in_flight_finishes_all_and_exits_0(succ_model_dir):
    # 20 ms per step: the 64 tokens take over a second, so SIGTERM lands mid-stream
    with child_server(succ_model_dir, step_delay_s=0.02) as server:
        streams = [open_stream(server, long_stream(64)) for _ in range(48)]
        server.proc.send_signal(signal.SIGTERM)
        host, port = server.http_addr.rsplit(":", 1)
        assert wait_for(lambda: _refused(host, int(port)))
        bodies = [read_until_closed_or(sock, DONE, received) for sock, received in streams]
        for sock, _ in streams:
            sock.close()
        assert all(DONE in body and b'"error"' not in body for body in bodies)
        assert all(body.count(b'"finish_reason":"length"') == 1 for body in bodies)
        assert all(body.count(b'"content":"') >= 64 for body in bodies)   # every token came
        assert server.proc.wait(TIMEOUT_S) == 0


def _refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except OSError:
        return True
    return False
