"""LoRA adapters served by name on smol-135m, as a user meets them over HTTP.

One server: smol-135m, the oracle's `smol-135m-lora` (a `[[models]]` table of kind "lora")
and one adapter this test writes (random r = 4 on q and v), runtime loading on behind an API
key, inside a LoRA root the test owns. The request's `model` picks the adapter: greedy
answers equal PEFT's (the oracle's text, 16 tokens, chosen logprobs within 1e-3) while the
base, in the same server, answers the oracle's base text; the written adapter answers as
its merged weights do with numpy. Tools, a JSON schema, a streamed chat, n > 1 and
/v1/models through openai-python; `cache_salt` checked and scoping the prefix cache;
`/v1/load_lora_adapter` and `/v1/unload_lora_adapter` with their refusals, and the unload
freeing the merged weights its adapter ran on alone (`tl_engine_lora_merged_bytes`). A
request alone on an adapter runs on merged weights (engine/model/lora_merge.py), so the
oracle answers here are the merged path's; tests/engine/model/test_lora_oracle.py holds the
grouped path to them too.
"""
from __future__ import annotations

import dataclasses
import json

import openai
import pytest
import requests

from engine.model import llama
from server.config import ServeConfig
from server.serve import spawn
from tests.e2e.helpers import REAL_CLIENT_TIMEOUT_S, REAL_KV_CACHE_MIB, metrics
from tests.engine.model.lora_writers import merged_weights, random_pairs, write_adapter
from tests.oracle import ORACLE_DIR

BASE, ORACLE_LORA, WRITTEN = "smol-135m", "smol-lora", "smol-written"
ORACLE_FOLDER = ORACLE_DIR / "lora" / "smol-135m-lora"
KEY = "test-key"
LOGPROB_TOLERANCE = 1e-3
WRITTEN_PROMPT = "The capital of France is"


def _cases(name: str) -> list[dict]:
    with open(ORACLE_FOLDER / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def written(tmp_path_factory, real_model):
    """The adapter this test writes (inside the LoRA root) and the merged model it equals."""
    root = tmp_path_factory.mktemp("lora-root")
    ranks = {f"model.layers.{i}.self_attn.{m}": 4 for i in range(real_model.config.num_layers)
             for m in ("q_proj", "v_proj")}
    pairs = random_pairs(real_model, ranks, seed=5, gain=0.3)
    write_adapter(root / "written", pairs, r=4, lora_alpha=8)
    merged = dataclasses.replace(real_model, weights=merged_weights(real_model, pairs,
                                                                    {m: 2.0 for m in pairs}))
    return root, merged


@pytest.fixture(scope="module")
def server(real_model_dir, written):
    root, _ = written
    cfg = ServeConfig.from_toml(f"""
[engine]
model_dir = "{real_model_dir}"
http_listen = "127.0.0.1:0"
health_listen = "127.0.0.1:0"
access_log = "off"
kv_cache_mib = {REAL_KV_CACHE_MIB}
api_key = "{KEY}"
allow_runtime_lora = true
lora_root = "{root}"
[[models]]
id = "{ORACLE_LORA}"
kind = "lora"
base = "{BASE}"
adapter_dir = "{ORACLE_FOLDER}"
[[models]]
id = "{WRITTEN}"
kind = "lora"
base = "{BASE}"
adapter_dir = "{root / 'written'}"
""", env={})
    handle = spawn(cfg)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key=KEY, max_retries=0,
                         timeout=REAL_CLIENT_TIMEOUT_S)


def _post(server, path: str, body: dict, key: str | None = KEY) -> requests.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return requests.post(server.http_url + path, json=body, headers=headers,
                         timeout=REAL_CLIENT_TIMEOUT_S)


def _complete(server, model: str, prompt_ids, **fields) -> dict:
    answer = _post(server, "/v1/completions", {"model": model, "prompt": prompt_ids,
                                                "max_tokens": 16, "temperature": 0, **fields})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_each_model_answers_its_own_oracle_text_in_one_server(server):
    for case in _cases("greedy.jsonl"):
        lora = _complete(server, ORACLE_LORA, case["prompt_ids"])
        base = _complete(server, BASE, case["prompt_ids"])
        assert lora["choices"][0]["text"] == case["adapter_text"], case["index"]
        assert base["choices"][0]["text"] == case["base_text"], case["index"]
        assert lora["usage"]["completion_tokens"] == len(case["adapter_ids"])
        assert lora["model"] == ORACLE_LORA and base["model"] == BASE
    assert sum(c["differs"] for c in _cases("greedy.jsonl")) >= 5        # the check can tell


def test_logprobs_are_peft_s_within_tolerance(server):
    for case in _cases("logprobs.jsonl"):
        answer = _complete(server, ORACLE_LORA, case["prompt_ids"], logprobs=5)
        got = answer["choices"][0]["logprobs"]["token_logprobs"]
        assert len(got) == len(case["chosen_logprob"])
        for k, (mine, theirs) in enumerate(zip(got, case["chosen_logprob"])):
            assert abs(mine - theirs) <= LOGPROB_TOLERANCE, (case["index"], k)


def test_the_written_adapter_answers_as_its_merged_weights(server, written, real_model):
    _, merged = written
    prompt = real_model.tokenizer.encode(WRITTEN_PROMPT)
    want = llama.generate(merged.config, merged.weights, list(prompt), max_new_tokens=12)
    plain = llama.generate(real_model.config, real_model.weights, list(prompt), max_new_tokens=12)
    assert want != plain                                                   # the check can tell
    answer = _complete(server, WRITTEN, prompt, max_tokens=12, ignore_eos=True)
    assert answer["choices"][0]["text"] == real_model.tokenizer.decode(want)


def test_n_choices_and_a_repeat_on_an_adapter_give_its_answer(server):
    case = _cases("greedy.jsonl")[0]
    answer = _complete(server, ORACLE_LORA, case["prompt_ids"], n=2)
    assert [c["text"] for c in answer["choices"]] == [case["adapter_text"]] * 2
    again = _complete(server, ORACLE_LORA, case["prompt_ids"])      # cached prefix, drafts
    assert again["choices"][0]["text"] == case["adapter_text"]


def test_models_lists_the_adapters_with_their_parent(client):
    cards = {m.id: m for m in client.models.list().data}
    assert set(cards) == {BASE, ORACLE_LORA, WRITTEN}
    assert cards[ORACLE_LORA].parent == BASE and cards[WRITTEN].parent == BASE
    assert cards[ORACLE_LORA].kind == "lora" and getattr(cards[BASE], "parent", None) is None
    assert client.models.retrieve(ORACLE_LORA).parent == BASE


def test_a_streamed_chat_a_tool_call_and_a_json_schema_on_an_adapter(client):
    stream = client.chat.completions.create(
        model=ORACLE_LORA, messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=12, temperature=0, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert {c.model for c in chunks} == {ORACLE_LORA}
    tool = {"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                       "required": ["city"]}}}
    called = client.chat.completions.create(
        model=ORACLE_LORA, messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[tool], tool_choice="required", max_tokens=80, temperature=0)
    call = called.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and "city" in json.loads(call.function.arguments)
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}},
              "required": ["answer"], "additionalProperties": False}
    shaped = client.chat.completions.create(
        model=WRITTEN, messages=[{"role": "user", "content": "2 + 2?"}], max_tokens=20,
        temperature=0, response_format={"type": "json_schema",
                                        "json_schema": {"name": "a", "schema": schema}})
    assert isinstance(json.loads(shaped.choices[0].message.content)["answer"], int)


def test_cache_salt_is_checked_and_scopes_the_prefix_cache(server):
    prompt = list(range(1000, 1040))      # 40 tokens no other test sends: 2 whole blocks
    for bad_salt in ("", 7, ["a"]):
        refused = _post(server, "/v1/completions", {"model": BASE, "prompt": "x",
                                                     "cache_salt": bad_salt})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "cache_salt"

    def hits() -> float:
        return metrics(server)["tl_engine_prefix_cache_hit_tokens_total"]
    _complete(server, BASE, prompt, cache_salt="tenant-a", max_tokens=1)
    before = hits()
    _complete(server, BASE, prompt, cache_salt="tenant-b", max_tokens=1)
    _complete(server, BASE, prompt, prompt_cache_key="tenant-a", max_tokens=1)
    _complete(server, ORACLE_LORA, prompt, cache_salt="tenant-a", max_tokens=1)
    assert hits() == before                     # another salt, none, another adapter: nothing
    _complete(server, BASE, prompt, cache_salt="tenant-a", max_tokens=1)
    assert hits() > before                      # the same salt shares


def test_runtime_load_and_unload(server, written):
    root, _ = written
    body = {"lora_name": "again", "lora_path": "written"}
    assert _post(server, "/v1/load_lora_adapter", body, key=None).status_code == 401
    outside = _post(server, "/v1/load_lora_adapter", {"lora_name": "x",
                                                       "lora_path": str(ORACLE_FOLDER)})
    assert outside.status_code == 400 and "outside" in outside.json()["error"]["message"]
    (root / "link").symlink_to(ORACLE_FOLDER)                  # a symlink out is outside too
    assert _post(server, "/v1/load_lora_adapter",
                 {"lora_name": "x", "lora_path": "link"}).status_code == 400
    (root / "broken").mkdir()
    (root / "broken" / "adapter_config.json").write_text('{"secret": "do-not-echo"}')
    broken = _post(server, "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "broken"})
    assert broken.status_code == 400 and "do-not-echo" not in broken.text
    assert "adapter_config.json" in broken.json()["error"]["message"]
    loaded = _post(server, "/v1/load_lora_adapter", body)
    assert loaded.status_code == 200, loaded.text
    assert _post(server, "/v1/load_lora_adapter", body).status_code == 400   # already loaded
    prompt = [504, 3575, 282, 4649, 314]
    assert _complete(server, "again", prompt)["choices"][0]["text"] == \
        _complete(server, WRITTEN, prompt)["choices"][0]["text"]
    built, _ = _merged(server)
    with requests.post(server.http_url + "/v1/completions", stream=True,
                       timeout=REAL_CLIENT_TIMEOUT_S, headers={"Authorization": f"Bearer {KEY}"},
                       json={"model": "again", "prompt": prompt, "max_tokens": 24,
                             "temperature": 0, "ignore_eos": True, "stream": True}) as running:
        lines = running.iter_lines()
        first = next(line for line in lines if line.startswith(b"data: "))   # it has begun
        now_built, held_bytes = _merged(server)
        assert now_built == built + 1 and held_bytes > 0     # alone on "again": merged
        unloaded = _post(server, "/v1/unload_lora_adapter", {"lora_name": "again"})
        assert unloaded.status_code == 200
        rest = [line for line in lines if line.startswith(b"data: ")]
    assert rest[-1] == b"data: [DONE]"                        # the stream in flight finished
    assert _merged(server) == (built + 1, 0)                 # the unload freed the copy
    texts = [json.loads(x[6:])["choices"][0]["text"] for x in [first] + rest[:-1]
             if json.loads(x[6:])["choices"]]
    assert "".join(texts).startswith(_complete(server, WRITTEN, prompt)["choices"][0]["text"])
    gone = _post(server, "/v1/completions", {"model": "again", "prompt": prompt})
    assert gone.status_code == 404
    assert _post(server, "/v1/unload_lora_adapter", {"lora_name": "again"}).status_code == 404


def _merged(server) -> tuple[float, float]:
    """The base engine's merges built so far and the merged weights' bytes it holds now."""
    samples = metrics(server)
    return samples["tl_engine_lora_merges_total"], samples["tl_engine_lora_merged_bytes"]
