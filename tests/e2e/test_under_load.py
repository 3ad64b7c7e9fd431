"""Fail fast, never fail late (over real sockets): a request is refused before its response
head (429 with the estimated wait as Retry-After, 400 when it can never fit) or served to
its end; waiting behind `max_num_seqs` is not an error. Engine steps are slowed with
`step_delay_s` (tests/fakes.py StepDelay through the engine seam) so that "running" and
"waiting" last long enough to observe."""
from __future__ import annotations

import threading

import requests

from tests.e2e.helpers import (TIMEOUT_S, chat_body, metrics, open_stream, post,
                               read_until_closed_or, running_server)
from tests.polling import wait_for

STEP_DELAY_S = 0.05


def _engine(**fields):
    from engine.api import EngineConfig
    return EngineConfig(**fields)


def long_stream(max_tokens: int) -> dict:
    return chat_body("a", max_tokens=max_tokens, temperature=0, stream=True, ignore_eos=True)


def test_a_wait_longer_than_the_deadline_is_refused_at_once_with_the_estimate(succ_model_dir):
    with running_server(succ_model_dir, queue_deadline_ms=300, step_delay_s=STEP_DELAY_S,
                        engine=_engine(max_num_seqs=1)) as server:
        # one finished request measures the service time (~20 steps of 50 ms)
        warm = post(server, "/v1/chat/completions", chat_body("a", max_tokens=20,
                                                              ignore_eos=True))
        assert warm.status_code == 200
        sock, _ = open_stream(server, long_stream(40))       # holds the only batch slot
        refused = post(server, "/v1/chat/completions", chat_body("x", max_tokens=2))
        assert refused.status_code == 429                    # at once, before any head:
        assert metrics(server)["tl_engine_active_sequences"] == 1    # the blocker still runs
        err = refused.json()["error"]
        assert err["code"] == "rate_limit_exceeded" and err["type"] == "rate_limit_error"
        assert "would wait about" in err["message"]
        assert int(refused.headers["Retry-After"]) >= 1
        body = read_until_closed_or(sock, b"data: [DONE]\n\n")
        assert b"data: [DONE]\n\n" in body and b'"error"' not in body
        sock.close()
        again = post(server, "/v1/chat/completions", chat_body("x", max_tokens=2))
        assert again.status_code == 200                      # room again: admitted


def test_waiting_behind_max_num_seqs_is_served_with_the_head_only_once_scheduled(succ_model_dir):
    """A stream queued behind a running one gets no head and no ping while it waits (even
    with pings due every 50 ms), then its whole answer: the role chunk comes first."""
    with running_server(succ_model_dir, step_delay_s=STEP_DELAY_S, ping_interval_s=0.05,
                        engine=_engine(max_num_seqs=1)) as server:
        first, _ = open_stream(server, long_stream(30))
        assert wait_for(lambda: metrics(server)["tl_engine_active_sequences"] == 1)
        result: dict = {}

        def second():
            result["r"] = post(server, "/v1/chat/completions", long_stream(3))
        thread = threading.Thread(target=second)
        thread.start()
        assert wait_for(lambda: metrics(server)["tl_engine_queue_depth"] == 1)
        read_until_closed_or(first, b"data: [DONE]\n\n")
        first.close()
        thread.join(TIMEOUT_S)
        queued = result["r"]
        assert queued.status_code == 200
        assert queued.content.startswith(b"data: ")          # no ping before the first token
        assert queued.content.endswith(b"data: [DONE]\n\n") and b'"error"' not in queued.content


def test_pings_keep_a_scheduled_quiet_stream_alive(succ_model_dir):
    with running_server(succ_model_dir, step_delay_s=0.3, ping_interval_s=0.05) as server:
        answer = post(server, "/v1/chat/completions", long_stream(4))
        assert answer.status_code == 200
        assert b": ping\n\n" in answer.content               # between tokens 300 ms apart
        assert answer.content.endswith(b"data: [DONE]\n\n")


def test_a_request_the_kv_pool_can_never_hold_is_a_400_at_once(succ_model_dir):
    with running_server(succ_model_dir,
                        engine=_engine(block_size=4, num_kv_blocks=8)) as server:   # 32 tokens
        too_big = post(server, "/v1/chat/completions", chat_body("a", max_tokens=64,
                                                                 stream=True))
        assert too_big.status_code == 400                    # a status: no stream was begun
        err = too_big.json()["error"]
        assert err["code"] == "context_length_exceeded" and "KV cache holds 32" in err["message"]
        fits = post(server, "/v1/chat/completions", chat_body("a", max_tokens=8))
        assert fits.status_code == 200


def test_queue_deadline_503_carries_retry_after(succ_model_dir):
    with running_server(succ_model_dir, queue_capacity=4, queue_deadline_ms=200,
                        step_delay_s=STEP_DELAY_S, engine=_engine(max_num_seqs=1)) as server:
        sock, _ = open_stream(server, long_stream(30))
        late = post(server, "/v1/chat/completions", chat_body("x", max_tokens=2, stream=True))
        assert late.status_code == 503 and int(late.headers["Retry-After"]) >= 1
        assert late.json()["error"]["code"] == "no_capacity"
        sock.close()
        assert wait_for(lambda: requests.get(server.health_url + "/metrics",
                                             timeout=TIMEOUT_S).ok)
