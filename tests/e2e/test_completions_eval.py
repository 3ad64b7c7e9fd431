"""/v1/completions for evaluation harnesses on the tiny random Llama: several prompts, echo,
prompt logprobs (equal to the dense reference's log-softmax at every position), max_tokens 0,
text_offset running across prompt and completion; through the official openai client too."""
from __future__ import annotations

import json

import numpy as np
import openai
import pytest

from engine.model import llama
from engine.model.loader import load_model
from tests.e2e.helpers import post, running_server, sse_events, openai_client

TOP = 3
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    model = load_model(tiny_llama_dir)
    with running_server(tiny_llama_dir, engine=_engine()) as handle:
        yield handle, model, tiny_llama_dir.name


def _engine():
    from engine.api import EngineConfig
    return EngineConfig(block_size=4, prefill_chunk=5, num_kv_blocks=256)   # chunked prefill


def _dense(model, ids) -> np.ndarray:
    logits = llama.forward(model.config, model.weights, list(ids)).astype(np.float64)  # [P, V]
    logits -= logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))                 # [P, V]


def test_echo_scores_every_prompt_of_a_batch_like_the_dense_model(tiny):
    handle, model, name = tiny
    prompts = ["hello world", "the quick brown fox jumps"]
    r = post(handle, "/v1/completions", {"model": name, "prompt": prompts, "echo": True,
                                         "max_tokens": 0, "logprobs": TOP})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert [c["index"] for c in doc["choices"]] == [0, 1]
    ids = [model.tokenizer.encode(p) for p in prompts]
    assert doc["usage"] == {"prompt_tokens": sum(map(len, ids)), "completion_tokens": 0,
                            "total_tokens": sum(map(len, ids))}
    for choice, prompt, prompt_ids in zip(doc["choices"], prompts, ids):
        assert choice["text"] == prompt and choice["finish_reason"] == "length"
        lp = choice["logprobs"]
        dense = _dense(model, prompt_ids)
        assert "".join(lp["tokens"]) == prompt
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        expected = [dense[p - 1, prompt_ids[p]] for p in range(1, len(prompt_ids))]
        np.testing.assert_allclose(lp["token_logprobs"][1:], expected, atol=TOLERANCE)
        for p, top in enumerate(lp["top_logprobs"][1:], start=1):
            # keys are token texts: byte tokens that decode alike ("\ufffd") share one key
            best = np.sort(dense[p - 1])[::-1][:TOP]
            assert 1 <= len(top) <= TOP
            assert abs(max(top.values()) - best[0]) < TOLERANCE
            assert all(np.min(np.abs(best - v)) < TOLERANCE for v in top.values())
        offsets = np.cumsum([0] + [len(t) for t in lp["tokens"]])[:-1].tolist()
        assert lp["text_offset"] == offsets


def test_echo_with_completion_continues_offsets_and_token_prompts_index_in_order(tiny):
    handle, model, name = tiny
    ids = model.tokenizer.encode("abc abc")
    r = post(handle, "/v1/completions", {"model": name, "prompt": [ids, ids[:3]], "echo": True,
                                         "max_tokens": 2, "logprobs": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    first, second = r.json()["choices"]
    assert (first["index"], second["index"]) == (0, 1)
    lp = first["logprobs"]
    assert len(lp["tokens"]) == len(ids) + 2                   # the prompt, then 2 tokens
    assert first["text"] == "".join(lp["tokens"])
    assert first["text"].startswith(model.tokenizer.decode(ids))
    offsets = np.cumsum([0] + [len(t) for t in lp["tokens"]])[:-1].tolist()
    assert lp["text_offset"] == offsets
    greedy = int(np.argmax(_dense(model, ids)[-1]))
    np.testing.assert_allclose(lp["token_logprobs"][len(ids)], _dense(model, ids)[-1, greedy],
                               atol=TOLERANCE)


def test_streamed_echo_sends_the_scored_prompt_first(tiny):
    handle, model, name = tiny
    r = post(handle, "/v1/completions", {"model": name, "prompt": "stream me", "echo": True,
                                         "max_tokens": 1, "logprobs": 0, "stream": True})
    chunks = [json.loads(e) for e in sse_events(r.content) if e != "[DONE]"]
    first = chunks[0]["choices"][0]
    assert first["text"] == "stream me" and first["logprobs"]["token_logprobs"][0] is None
    last = chunks[-1]["choices"][0]
    assert last["logprobs"]["text_offset"] == [len("stream me")]


def test_openai_client_scores_a_batch(tiny):
    handle, model, name = tiny
    client = openai_client(handle)
    done = client.completions.create(model=name, prompt=["one", "two three"], echo=True,
                                     max_tokens=0, logprobs=20)
    assert [c.text for c in done.choices] == ["one", "two three"]
    assert all(1 <= len(t) <= 20 for c in done.choices for t in c.logprobs.top_logprobs[1:])
    assert done.choices[0].logprobs.token_logprobs[0] is None
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=name, prompt="x", max_tokens=0)
    with pytest.raises(openai.UnprocessableEntityError):
        client.completions.create(model=name, prompt="x", suffix="y")
