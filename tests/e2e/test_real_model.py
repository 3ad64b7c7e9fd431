"""Smoke test: serve the real smol-135m and check one greedy answer against Hugging Face."""
from __future__ import annotations


import pytest

from engine.api import EngineConfig
from tests.e2e.helpers import post, running_server
from tests.oracle import read_jsonl


@pytest.mark.real_model
def test_real_model_greedy_answer_matches_hf(real_model_dir):
    case = read_jsonl("hf_greedy.jsonl")[0]
    with running_server(real_model_dir, engine=EngineConfig(kv_cache_mib=32)) as server:
        r = post(server, "/v1/chat/completions",
                 {"model": "smol-135m", "messages": case["messages"], "temperature": 0,
                  "max_tokens": case["max_new_tokens"]})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["usage"]["prompt_tokens"] == case["n_prompt_tokens"]
    assert doc["choices"][0]["message"]["content"] == case["output_text"]
    assert doc["choices"][0]["finish_reason"] == ("stop" if case["finish"] == "eos" else "length")
    assert doc["usage"]["completion_tokens"] == case["n_output_tokens"]
