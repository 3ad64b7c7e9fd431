"""The official `anthropic` Python SDK against a real server on the succ model (after byte i,
byte i+1: every answer is known): `messages.create`, `messages.stream()` (text_stream,
get_final_message) adding up to the whole message at temperature 0, stop sequences,
count_tokens, each error class the SDK maps a status to, the API key as `x-api-key`, and a
client that leaves a stream. This SDK version sends `temperature` only through extra_body
(its `create` takes no sampling fields), as a client of the raw API would send it."""
from __future__ import annotations

import threading

import anthropic
import pytest
import requests

from engine.api import EngineConfig
from tests.e2e.helpers import (TIMEOUT_S, chat_body, metrics, open_stream, post,
                               running_server, server_fixture)
from tests.polling import wait_for

STEP_DELAY_S = 0.02
FREED_WITHIN_STEPS = 10         # a client that left is noticed and aborted within these
GREEDY = {"temperature": 0}
ASK = [{"role": "user", "content": "abc"}]

server = server_fixture("succ_model_dir", queue_capacity=1, step_delay_s=STEP_DELAY_S,
                        engine=EngineConfig(max_num_seqs=1, block_size=4, prefix_cache="none"))


def sdk(handle, **options) -> anthropic.Anthropic:
    """The SDK pointed at the server (its base URL has no /v1: the SDK adds it)."""
    return anthropic.Anthropic(base_url=handle.http_url, api_key=options.pop("api_key", "unused"),
                               max_retries=0, timeout=TIMEOUT_S, **options)


@pytest.fixture(scope="module")
def client(server):
    return sdk(server)


def blocks(message) -> list[dict]:
    """A message's content as plain values (the stream helper's blocks are its Parsed types)."""
    return [{k: v for k, v in block.model_dump().items() if k != "parsed_output"}
            for block in message.content]


def test_create_and_the_streamed_message_are_the_same_answer(client):
    whole = client.messages.create(model="succ", max_tokens=5, messages=ASK, extra_body=GREEDY)
    assert whole.id.startswith("msg_") and whole.type == "message" and whole.role == "assistant"
    assert [(b.type, b.text) for b in whole.content] == [("text", "defgh")]
    assert (whole.stop_reason, whole.stop_sequence) == ("max_tokens", None)
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (3, 5)
    with client.messages.stream(model="succ", max_tokens=5, messages=ASK,
                                extra_body=GREEDY) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) == 5 and "".join(pieces) == "defgh"
    assert blocks(final) == blocks(whole)
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == \
        ("max_tokens", 3, 5)


def test_stop_sequences_name_the_one_that_matched_streamed_or_not(client):
    ask = dict(model="succ", max_tokens=20, messages=ASK, stop_sequences=["zz", "g"],
               extra_body=GREEDY)
    whole = client.messages.create(**ask)
    assert whole.content[0].text == "def"
    assert (whole.stop_reason, whole.stop_sequence) == ("stop_sequence", "g")
    with client.messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert (blocks(final), final.stop_reason, final.stop_sequence) == \
        (blocks(whole), "stop_sequence", "g")


def test_count_tokens_is_what_create_counts_as_input(client):
    system = [{"type": "text", "text": "mn"}]
    counted = client.messages.count_tokens(model="succ", system=system, messages=ASK)
    whole = client.messages.create(model="succ", system=system, messages=ASK, max_tokens=1)
    assert counted.input_tokens == whole.usage.input_tokens > 3     # the system text counts


def test_error_classes(client, server):
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model="succ", max_tokens=2, messages=ASK,
                               extra_body={"temperature": 1.5})
    assert bad.value.status_code == 400
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="succ", max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    with pytest.raises(anthropic.BadRequestError) as too_long:      # a coding tool's prompt
        client.messages.create(model="succ", max_tokens=2, messages=ASK, system="x" * 4000)
    assert too_long.value.body["error"]["type"] == "invalid_request_error"
    assert "maximum context length" in too_long.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="claude-opus-4", max_tokens=2, messages=ASK)
    assert missing.value.body == {"type": "error", "error": {
        "type": "not_found_error",
        "message": "The model 'claude-opus-4' does not exist; this server serves 'succ'."}}
    too_big = requests.post(server.http_url + "/v1/messages", data=b"x" * (9 << 20),
                            timeout=TIMEOUT_S)
    assert too_big.status_code == 413
    assert too_big.json()["error"]["type"] == "request_too_large"
    # fill the queue of one: a running stream and one waiting request
    sock, _ = open_stream(server, chat_body("a", max_tokens=200, stream=True, ignore_eos=True))
    waiting = threading.Thread(target=lambda: post(server, "/v1/chat/completions",
                                                   chat_body("b", max_tokens=1)))
    waiting.start()
    assert wait_for(lambda: metrics(server)["tl_engine_queue_depth"] == 1)
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(model="succ", max_tokens=2, messages=ASK)
    assert limited.value.body["error"]["type"] == "rate_limit_error"
    assert limited.value.response.headers["retry-after"] == "1"
    sock.close()
    waiting.join(TIMEOUT_S)


def test_request_id_and_priority_headers_work_as_on_the_openai_routes(client):
    raw = client.messages.with_raw_response.create(
        model="succ", max_tokens=1, messages=ASK,
        extra_headers={"X-Request-Id": "req-anthropic-1", "X-TL-Priority": "5"})
    assert raw.headers["x-request-id"] == "req-anthropic-1" and raw.parse().content
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model="succ", max_tokens=1, messages=ASK,
                               extra_headers={"X-TL-Priority": "high"})
    assert "X-TL-Priority" in bad.value.body["error"]["message"]


def test_a_draining_server_is_overloaded_529(server):
    client = sdk(server)
    server.state.is_draining = True         # what on_drain sets; the fixture's last test
    try:
        with pytest.raises(anthropic.OverloadedError) as busy:
            client.messages.create(model="succ", max_tokens=2, messages=ASK)
        assert busy.value.status_code == 529
        assert busy.value.body["error"]["type"] == "overloaded_error"
    finally:
        server.state.is_draining = False


def test_queue_deadline_is_overloaded_529(succ_model_dir):
    """Admitted behind a long stream, unscheduled past the deadline: 529, streamed or not."""
    with running_server(succ_model_dir, queue_capacity=4, queue_deadline_ms=2000,
                        step_delay_s=0.05, engine=EngineConfig(max_num_seqs=1)) as handle:
        sock, _ = open_stream(handle, chat_body("a", max_tokens=400, stream=True,
                                                ignore_eos=True))
        answers: dict = {}
        ask = {"model": "succ", "max_tokens": 2, "messages": ASK}
        threads = [threading.Thread(target=lambda stream=stream: answers.update({stream: post(
            handle, "/v1/messages", dict(ask, stream=stream))})) for stream in (False, True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT_S)
        for answer in answers.values():         # no head was sent: a status either way
            assert answer.status_code == 529
            assert answer.json()["error"]["type"] == "overloaded_error"
        sock.close()


def test_the_api_key_as_x_api_key_or_bearer(succ_model_dir):
    with running_server(succ_model_dir, api_key="k-123") as handle:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            sdk(handle, api_key="wrong").messages.create(model="succ", max_tokens=1,
                                                          messages=ASK)
        assert refused.value.body["error"]["type"] == "authentication_error"
        keyed = sdk(handle, api_key="k-123")                  # the SDK sends x-api-key
        assert keyed.messages.create(model="succ", max_tokens=1, messages=ASK).content
        bearer = sdk(handle, api_key=None, auth_token="k-123")  # Authorization: Bearer
        assert bearer.messages.count_tokens(model="succ", messages=ASK).input_tokens == 3
        versioned = requests.post(handle.http_url + "/v1/messages", timeout=TIMEOUT_S, json={
            "model": "succ", "max_tokens": 1, "messages": ASK},
            headers={"x-api-key": "k-123", "anthropic-version": "2023-06-01"})
        assert versioned.status_code == 200


def test_a_client_that_leaves_a_stream_frees_its_blocks_within_a_step(server):
    body = {"model": "succ", "max_tokens": 400, "messages": ASK, "stream": True}
    sock, received = open_stream(server, body, "/v1/messages")
    assert b"event: message_start\ndata: " in received
    assert wait_for(lambda: metrics(server)['tl_engine_kv_blocks{state="used"}'] > 0)
    steps_at_close = metrics(server)["tl_engine_steps_total"]
    sock.close()

    def freed():
        m = metrics(server)
        return m["tl_engine_active_sequences"] == 0 and m['tl_engine_kv_blocks{state="used"}'] == 0
    assert wait_for(freed)
    assert metrics(server)["tl_engine_steps_total"] - steps_at_close <= FREED_WITHIN_STEPS
