"""Fault behaviour over real sockets: a full queue, a queue deadline, a client that leaves,
and a drain (docs/CONTRACT.md). Engine steps are slowed with `step_delay_s` (tests/fakes.py
StepDelay through the engine seam)."""
from __future__ import annotations

import socket
import threading

import pytest
import requests

from tests.e2e.helpers import (TIMEOUT_S, chat_body, metrics, open_stream, post,
                               read_until_closed_or, running_server, send_stream,
                               server_fixture)
from tests.polling import wait_for

STEP_DELAY_S = 0.05
FREED_WITHIN_STEPS = 10        # a client that left is noticed and aborted within these


def long_stream(max_tokens: int) -> dict:
    return chat_body("a", max_tokens=max_tokens, temperature=0, stream=True, ignore_eos=True)


def _engine(**fields):
    from engine.api import EngineConfig
    return EngineConfig(**fields)


queue_of_one = server_fixture("succ_model_dir", queue_capacity=1, step_delay_s=STEP_DELAY_S,
                              engine=_engine(max_num_seqs=1))


def test_full_queue_answers_429_with_retry_after(queue_of_one):
    server = queue_of_one
    sock, _ = open_stream(server, long_stream(40))          # running: holds the only seq slot
    queued: dict = {}

    def second():
        queued["r"] = post(server, "/v1/chat/completions", chat_body("x", max_tokens=2,
                                                                     temperature=0))
    thread = threading.Thread(target=second)
    thread.start()
    assert wait_for(lambda: metrics(server)["tl_engine_queue_depth"] == 1)
    third = post(server, "/v1/chat/completions", chat_body("y", max_tokens=2))
    assert third.status_code == 429
    assert third.headers["Retry-After"] == "1"
    # at once, not after a wait: the queue it was refused from has not moved yet
    assert metrics(server)["tl_engine_queue_depth"] == 1 and "r" not in queued
    err = third.json()["error"]
    assert err["code"] == "rate_limit_exceeded" and err["type"] == "rate_limit_error"
    assert third.headers["X-Request-Id"]
    thread.join(TIMEOUT_S)
    assert queued["r"].status_code == 200                   # the queued one ran later
    assert queued["r"].json()["choices"][0]["message"]["content"] == "yz"
    rest = read_until_closed_or(sock, b"data: [DONE]\n\n")
    assert b"data: [DONE]\n\n" in rest
    sock.close()


def test_queue_deadline_answers_503_no_capacity(succ_model_dir):
    """Admitted (the running stream has run a few steps: a short estimated wait), then
    unscheduled past the deadline: a 503 status, streamed or not."""
    with running_server(succ_model_dir, queue_capacity=4, queue_deadline_ms=2000,
                        step_delay_s=STEP_DELAY_S, engine=_engine(max_num_seqs=1)) as server:
        sock, _ = open_stream(server, long_stream(400))
        answers: dict = {}
        threads = [threading.Thread(target=lambda stream=stream: answers.update({stream: post(
            server, "/v1/chat/completions", chat_body("x", max_tokens=2, stream=stream))}))
            for stream in (False, True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT_S)
        assert answers[False].status_code == 503
        assert answers[False].json()["error"]["code"] == "no_capacity"
        assert answers[True].status_code == 503             # no head was sent yet: a status
        sock.close()


def test_disconnect_frees_blocks_within_a_step(succ_model_dir):
    with running_server(succ_model_dir, step_delay_s=STEP_DELAY_S,
                        engine=_engine(block_size=4, prefix_cache="none")) as server:
        sock, _ = open_stream(server, long_stream(500))
        busy = wait_for(lambda: metrics(server)['tl_engine_kv_blocks{state="used"}'] > 0)
        assert busy and metrics(server)["tl_engine_active_sequences"] == 1
        steps_at_close = metrics(server)["tl_engine_steps_total"]
        sock.close()

        def freed():
            m = metrics(server)
            return (m["tl_engine_active_sequences"] == 0
                    and m['tl_engine_kv_blocks{state="used"}'] == 0)
        assert wait_for(freed)
        # counted in engine steps, not seconds: a few, not the ~490 the stream had left
        assert metrics(server)["tl_engine_steps_total"] - steps_at_close <= FREED_WITHIN_STEPS


def test_drain_finishes_in_flight_and_refuses_new(succ_model_dir):
    with running_server(succ_model_dir, step_delay_s=STEP_DELAY_S) as server:
        host, port = server.http_addr.rsplit(":", 1)
        idle = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)  # kept open
        sock, received = open_stream(server, long_stream(30))
        server.drain()
        ready = wait_for(lambda: requests.get(server.health_url + "/readyz",
                                              timeout=TIMEOUT_S).status_code == 503)
        assert ready
        assert requests.get(server.health_url + "/healthz", timeout=TIMEOUT_S).status_code == 200
        with pytest.raises(requests.ConnectionError):
            requests.get(server.http_url + "/v1/models", timeout=TIMEOUT_S)
        idle.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        refused = idle.recv(65536)
        assert refused.startswith(b"HTTP/1.1 503")
        idle.close()
        body = read_until_closed_or(sock, b"data: [DONE]\n\n", received)
        assert b"data: [DONE]\n\n" in body
        assert body.count(b'"finish_reason":"length"') == 1
        sock.close()
        assert server.join(10.0) == 0


def test_an_idle_server_serves_whatever_it_refused_before(succ_model_dir):
    """The lock-out sequence on one server: one stream running, one queued, more refused
    with 429, every client leaves; the idle server then serves a new stream and drains it
    (it answered 429 'would wait about 7302 s' for as long as traffic came)."""
    with running_server(succ_model_dir, queue_capacity=1, queue_deadline_ms=5000,
                        step_delay_s=STEP_DELAY_S, engine=_engine(max_num_seqs=1)) as server:
        running, _ = open_stream(server, long_stream(400))
        queued = send_stream(server, long_stream(400))
        assert wait_for(lambda: metrics(server)["tl_engine_queue_depth"] == 1)
        refused = [post(server, "/v1/chat/completions", chat_body("y", max_tokens=300))
                   for _ in range(8)]
        assert [r.status_code for r in refused] == [429] * 8
        running.close()
        queued.close()
        assert wait_for(lambda: (lambda m: m["tl_engine_queue_depth"] == 0
                                 and m["tl_engine_active_sequences"] == 0)(metrics(server)))
        sock, received = open_stream(server, long_stream(30))
        assert received.startswith(b"HTTP/1.1 200")
        server.drain()
        body = read_until_closed_or(sock, b"data: [DONE]\n\n", received)
        assert body.count(b'"finish_reason":"length"') == 1
        sock.close()
        assert server.join(10.0) == 0
