"""The oracle's tiny-base adapters over HTTP: one server, two chat models, three adapters.

qwen3-tiny carries two adapters at once (`qwen3-tiny-lora-a` on q/k/v/o, `-b` rslora on
gate/up/down), llama32-tiny its `all-linear` one. Every greedy case of ../shared/oracle/lora/
is asked of each adapter and of its plain base, all in one server: each answers PEFT's ids
(the text they decode to, with the base's own tokenizer; 16 tokens) and the adapters' chosen
logprobs are PEFT's within 1e-3. The ids of the two qwen3 adapters differ from each other
and from the base's on most prompts, so a request served on another's adapter fails here.
"""
from __future__ import annotations

import json

import pytest
import requests

from engine.api import load_model
from server.config import ServeConfig
from server.serve import spawn
from tests.oracle import ORACLE_DIR

LORA_DIR = ORACLE_DIR / "lora"
BASES = {"qwen3-tiny": ORACLE_DIR / "families" / "qwen3-tiny" / "model",
         "llama32-tiny": ORACLE_DIR / "families" / "llama32-tiny" / "model"}
ADAPTERS = {"qwen3-tiny-lora-a": "qwen3-tiny", "qwen3-tiny-lora-b": "qwen3-tiny",
            "llama32-tiny-lora": "llama32-tiny"}
LOGPROB_TOLERANCE = 1e-3
TIMEOUT_S = 60


def _cases(adapter: str, name: str) -> list[dict]:
    with open(LORA_DIR / adapter / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def access_log(tmp_path_factory):
    return tmp_path_factory.mktemp("log") / "access.jsonl"


@pytest.fixture(scope="module")
def server(access_log):
    tables = "".join(f"""
[[models]]
id = "{name}"
kind = "lora"
base = "{base}"
adapter_dir = "{LORA_DIR / name}"
""" for name, base in ADAPTERS.items())
    cfg = ServeConfig.from_toml(f"""
[engine]
model_dir = "{BASES['qwen3-tiny']}"
model_id = "qwen3-tiny"
http_listen = "127.0.0.1:0"
health_listen = "127.0.0.1:0"
access_log = "{access_log}"
kv_cache_mib = 16
[[models]]
id = "llama32-tiny"
model_dir = "{BASES['llama32-tiny']}"
kv_cache_mib = 16
""" + tables, env={})
    handle = spawn(cfg)
    yield handle
    handle.stop()


def _complete(server, model: str, case: dict, **fields) -> dict:
    answer = requests.post(server.http_url + "/v1/completions", timeout=TIMEOUT_S, json={
        "model": model, "prompt": case["prompt_ids"], "max_tokens": 16, "temperature": 0,
        "stop_token_ids": case.get("stop_ids", []), **fields})
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_each_adapter_and_its_base_answer_peft_s_ids(server, adapter):
    tokenizer = load_model(BASES[ADAPTERS[adapter]]).tokenizer
    cases = _cases(adapter, "greedy.jsonl")
    assert sum(c["differs"] for c in cases) >= 5                     # the check can tell
    for case in cases:
        lora = _complete(server, adapter, case)
        base = _complete(server, ADAPTERS[adapter], case)
        assert lora["text"] == tokenizer.decode(case["adapter_ids"]), (adapter, case["index"])
        assert base["text"] == tokenizer.decode(case["base_ids"]), (adapter, case["index"])


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_each_adapter_s_logprobs_are_peft_s(server, adapter):
    for case in _cases(adapter, "logprobs.jsonl"):
        got = _complete(server, adapter, case, logprobs=5)["logprobs"]["token_logprobs"]
        assert len(got) == len(case["chosen_logprob"])
        for k, (mine, theirs) in enumerate(zip(got, case["chosen_logprob"])):
            assert abs(mine - theirs) <= LOGPROB_TOLERANCE, (adapter, case["index"], k)


def test_responses_on_an_adapter_and_the_access_log_names_it(server, access_log):
    case = _cases("qwen3-tiny-lora-b", "greedy.jsonl")[0]
    tokenizer = load_model(BASES["qwen3-tiny"]).tokenizer
    prompt = tokenizer.decode(case["prompt_ids"])
    asked = {"input": prompt, "max_output_tokens": 8, "temperature": 0}
    answers = {}
    for model in ("qwen3-tiny-lora-b", "qwen3-tiny"):
        reply = requests.post(server.http_url + "/v1/responses", timeout=TIMEOUT_S,
                              json={"model": model, **asked})
        assert reply.status_code == 200, reply.text
        doc = reply.json()
        assert doc["model"] == model
        answers[model] = doc["output"][0]["content"][0]["text"]
    assert answers["qwen3-tiny-lora-b"] != answers["qwen3-tiny"]      # the adapter ran
    logged = [json.loads(line) for line in access_log.read_text().splitlines()]
    assert {e.get("model") for e in logged if e.get("path") == "/v1/responses"} == \
        {"qwen3-tiny-lora-b", "qwen3-tiny"}
