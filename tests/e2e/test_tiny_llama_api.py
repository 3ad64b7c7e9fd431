"""Differential and property tests on the tiny random Llama (2 layers, byte-level BPE, no
chat template: the server's plain default template)."""
from __future__ import annotations

import base64
import struct
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from engine.api import SpeculativeConfig
from engine.model import llama
from engine.model.loader import load_model
from server.config import ServeConfig
from tests.e2e.helpers import (chat_body, chat_stream_text, post, running_server, server_fixture,
                               stream_chunks)


@pytest.fixture(scope="module")
def model_id(tiny_llama_dir):
    return tiny_llama_dir.name


server = server_fixture("tiny_llama_dir")


@pytest.fixture(scope="module")
def tiny_model(tiny_llama_dir):
    return load_model(tiny_llama_dir)


def chat(server, model_id, content, **fields):
    r = post(server, "/v1/chat/completions", chat_body(content, model=model_id, **fields))
    assert r.status_code == 200, r.text
    return r


def test_stream_equals_nonstream_at_temperature_0(server, model_id):
    for content in ("Hello there", "The quick brown fox", "1 2 3"):
        plain = chat(server, model_id, content, max_tokens=24, temperature=0).json()
        text = plain["choices"][0]["message"]["content"]
        chunks, done = stream_chunks(chat(server, model_id, content, max_tokens=24,
                                          temperature=0, stream=True,
                                          stream_options={"include_usage": True}))
        assert done
        assert chat_stream_text(chunks) == text
        assert chunks[-1]["usage"] == plain["usage"]
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        assert finish[-1] == plain["choices"][0]["finish_reason"]


def test_seed_reproduces_sampling(server, model_id):
    def sample(seed):
        doc = chat(server, model_id, "Once upon a time", max_tokens=16, temperature=1.0,
                   seed=seed, ignore_eos=True).json()
        return doc["choices"][0]["message"]["content"]

    first = sample(1234)
    assert sample(1234) == first
    others = {sample(seed) for seed in (1, 2, 3)}
    assert any(other != first for other in others)


def test_usage_counts_the_templated_prompt(server, model_id, tiny_model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    doc = post(server, "/v1/chat/completions",
               {"model": model_id, "messages": messages, "max_tokens": 1}).json()
    rendered = "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n"   # the plain default
    expected = len(tiny_model.tokenizer.encode(rendered))
    assert doc["usage"]["prompt_tokens"] == expected
    without_generation_prompt = len(tiny_model.tokenizer.encode(rendered[:-len("<|assistant|>\n")]))
    assert expected > without_generation_prompt
    tokenized = post(server, "/v1/tokenize", {"model": model_id, "messages": messages}).json()
    assert tokenized["count"] == expected


def test_concurrent_streams_equal_serial(server, model_id):
    prompts = [f"prompt number {i} says" + " hi" * i for i in range(8)]

    def run(content):
        chunks, done = stream_chunks(chat(server, model_id, content, max_tokens=20,
                                          temperature=0, stream=True))
        assert done
        return chat_stream_text(chunks)

    serial = [run(p) for p in prompts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(run, prompts))
    assert parallel == serial
    assert len(set(serial)) > 1            # the prompts really lead to different answers


def test_embeddings_are_mean_pooled_and_normalized(server, model_id, tiny_model):
    texts = ["hello world", "a", "embeddings are mean pooled"]
    r = post(server, "/v1/embeddings", {"model": model_id, "input": texts,
                                        "encoding_format": "float"})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["object"] == "list" and [d["index"] for d in doc["data"]] == [0, 1, 2]
    tok = tiny_model.tokenizer
    ids = [tok.encode(t) for t in texts]
    assert doc["usage"]["prompt_tokens"] == sum(map(len, ids))
    for item, token_ids in zip(doc["data"], ids):
        hidden = llama.hidden_states(tiny_model.config, tiny_model.weights, np.array(token_ids))      # [T, d]
        mean = hidden.mean(axis=0)                                  # [d]
        expected = mean / np.linalg.norm(mean)
        got = np.array(item["embedding"])
        assert got.shape == expected.shape
        assert np.allclose(got, expected, atol=1e-4)
        assert abs(np.linalg.norm(got) - 1.0) < 1e-5
    # base64 is the same vectors as little-endian float32
    b64 = post(server, "/v1/embeddings", {"model": model_id, "input": texts[0],
                                          "encoding_format": "base64"}).json()
    raw = base64.b64decode(b64["data"][0]["embedding"])
    vec = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert np.allclose(vec, doc["data"][0]["embedding"], atol=1e-6)


def test_speculative_runtime_config_drives_the_serving_path(server, tiny_llama_dir, model_id):
    toml = ('[engine.speculative]\nmethod = "prompt_lookup"\nnum_speculative_tokens = 4\n'
            'prompt_lookup_min = 1\nprompt_lookup_max = 3\n')
    cfg = ServeConfig.from_toml(toml, {"TL_ENGINE__PREFILL_CHUNK": "64"})
    assert cfg.engine.speculative == SpeculativeConfig(method="prompt_lookup", num_speculative_tokens=4,
                                                       prompt_lookup_min=1, prompt_lookup_max=3)
    prompts = ["abc abc abc abc abc", "the cat the cat the cat", "x y z x y z"]
    with running_server(tiny_llama_dir, engine=cfg.engine) as spec_server:
        for content in prompts:
            plain = chat(server, model_id, content, max_tokens=24, temperature=0).json()
            fast = chat(spec_server, model_id, content, max_tokens=24, temperature=0).json()
            assert fast["choices"][0]["message"] == plain["choices"][0]["message"]
            assert fast["usage"] == plain["usage"]
        stats = spec_server.bridge.stats
        assert stats.spec_draft_tokens > 0          # the speculative path really ran

