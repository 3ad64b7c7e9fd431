"""The official `openai` Python client against the real server (succ model)."""
from __future__ import annotations

import threading

import openai
import pytest

from engine.api import EngineConfig
from tests.e2e.helpers import (chat_body, client_fixture, metrics, open_stream, post,
                               server_fixture)
from tests.polling import wait_for


server = server_fixture("succ_model_dir", queue_capacity=1, step_delay_s=0.02,
                        engine=EngineConfig(max_num_seqs=1))
client = client_fixture(timeout_s=30)


def test_client_chat_and_stream_with_usage(client):
    done = client.chat.completions.create(model="succ", messages=[{"role": "user",
                                                                   "content": "a"}],
                                          max_tokens=3, temperature=0)
    assert done.choices[0].message.content == "bcd"
    assert done.choices[0].message.role == "assistant"
    assert done.choices[0].finish_reason == "length"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (1, 3)
    stream = client.chat.completions.create(model="succ", messages=[{"role": "user",
                                                                     "content": "a"}],
                                            max_tokens=3, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "bcd"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage.total_tokens == 4


def test_client_completions_models_and_embeddings(client):
    done = client.completions.create(model="succ", prompt="k", max_tokens=4, temperature=0)
    assert done.choices[0].text == "lmno" and done.usage.completion_tokens == 4
    assert [m.id for m in client.models.list()] == ["succ"]
    assert client.models.retrieve("succ").id == "succ"
    by_default = client.embeddings.create(model="succ", input=["hello", "world"])  # base64
    as_floats = client.embeddings.create(model="succ", input=["hello", "world"],
                                         encoding_format="float")
    assert len(by_default.data) == 2
    for a, b in zip(by_default.data, as_floats.data):
        assert len(a.embedding) == len(b.embedding) == 257
        assert max(abs(x - y) for x, y in zip(a.embedding, b.embedding)) < 1e-6
    assert by_default.usage.prompt_tokens == 10


def test_client_error_classes(client, server):
    def ask(**fields):
        return client.chat.completions.create(
            model=fields.pop("model", "succ"), messages=[{"role": "user", "content": "a"}],
            max_tokens=2, **fields)

    with pytest.raises(openai.BadRequestError) as bad:
        ask(temperature=5)
    assert bad.value.status_code == 400 and bad.value.param == "temperature"
    with pytest.raises(openai.NotFoundError) as missing:
        ask(model="gpt-4o")
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.UnprocessableEntityError) as unsupported:
        ask(extra_body={"functions": [{"name": "f", "parameters": {}}]})
    assert unsupported.value.code == "unsupported_parameter"
    # fill the queue of one: a running stream plus one waiting request
    sock, _ = open_stream(server, chat_body("a", max_tokens=60, stream=True, ignore_eos=True))
    waiting = threading.Thread(target=lambda: post(server, "/v1/chat/completions",
                                                   chat_body("b", max_tokens=1)))
    waiting.start()
    assert wait_for(lambda: metrics(server)["tl_engine_queue_depth"] == 1)
    with pytest.raises(openai.RateLimitError) as limited:
        ask()
    assert limited.value.code == "rate_limit_exceeded"
    assert limited.value.response.headers["retry-after"] == "1"
    sock.close()
    waiting.join(30)


def test_client_content_parts_and_developer_role(client):
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    done = client.chat.completions.create(
        model="succ", messages=[{"role": "developer", "content": parts}], max_tokens=2,
        temperature=0)
    assert done.usage.prompt_tokens == 3                  # "a\nb": the parts joined by "\n"
    assert done.choices[0].message.content == "cd"
    with pytest.raises(openai.UnprocessableEntityError) as info:
        client.chat.completions.create(model="succ", messages=[{"role": "user", "content": [
            parts[0], {"type": "image_url", "image_url": {"url": "data:,"}}]}], max_tokens=1)
    assert info.value.body["param"] == "messages[0].content[1].type"
