"""A chat model and a sentence-embedding model in one server, named by `[[models]]`.

The request's `model` picks the model: chat goes to the chat engine, embeddings to the
encoder (or to the chat model's own pooling when it is named); each refuses what it does
not serve by name; /v1/models lists both with what they can do; /metrics labels each
engine's samples with its model; /readyz is ready once both loaded; the engine view shows
both; the access log names the model of each request. A `kind` the folder contradicts
stops the start-up with one line (several chat models: test_two_chat_models.py).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import requests

from server.config import ServeConfig
from server.serve import StartupError, spawn
from tests.e2e.helpers import REAL_CLIENT_TIMEOUT_S, parse_metrics
from tests.oracle import read_jsonl

pytestmark = pytest.mark.real_model

ENCODER = "minilm"
ROW = read_jsonl("families/minilm-l6/embeddings.jsonl")[0]


def two_model_config(chat_dir, encoder_dir, tmp_path, extra: str = "") -> ServeConfig:
    text = f"""
[engine]
model_dir = "{chat_dir}"
http_listen = "127.0.0.1:0"
health_listen = "127.0.0.1:0"
access_log = "{tmp_path / 'access.jsonl'}"

[[models]]
id = "{ENCODER}"
model_dir = "{encoder_dir}"
kind = "embedding"
max_batch_tokens = 256
queue_capacity = 8
{extra}"""
    return ServeConfig.from_toml(text, env={})


@pytest.fixture(scope="module")
def server(succ_model_dir, minilm_dir, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("two")
    handle = spawn(two_model_config(succ_model_dir, minilm_dir, tmp_path))
    handle.access_path = tmp_path / "access.jsonl"
    yield handle
    handle.stop()


def post(server, path: str, body: dict) -> requests.Response:
    return requests.post(server.http_url + path, json=body, timeout=REAL_CLIENT_TIMEOUT_S)


def test_the_model_field_picks_the_engine(server):
    chat = post(server, "/v1/chat/completions", {"model": "succ", "max_tokens": 2,
                                                 "messages": [{"role": "user", "content": "a"}]})
    assert chat.status_code == 200 and chat.json()["model"] == "succ"
    enc = post(server, "/v1/embeddings", {"model": ENCODER, "input": ROW["text"]})
    assert enc.status_code == 200 and enc.json()["model"] == ENCODER
    vector = np.array(enc.json()["data"][0]["embedding"], dtype=np.float32)
    assert np.abs(vector - np.array(ROW["embedding"], dtype=np.float32)).max() <= 1e-5
    pooled = post(server, "/v1/embeddings", {"model": "succ", "input": "a"})
    assert pooled.status_code == 200 and len(pooled.json()["data"][0]["embedding"]) != 384


def test_each_model_refuses_what_it_does_not_serve_and_unknown_ids_stay_404(server):
    chat = post(server, "/v1/chat/completions", {"model": ENCODER,
                                                 "messages": [{"role": "user", "content": "a"}]})
    assert chat.status_code == 400 and ENCODER in chat.json()["error"]["message"]
    unknown = post(server, "/v1/embeddings", {"model": "gone", "input": "a"})
    assert unknown.status_code == 404
    assert "'succ'" in unknown.json()["error"]["message"]
    assert f"'{ENCODER}'" in unknown.json()["error"]["message"]


def test_the_model_list_has_both_with_their_capabilities(server):
    cards = requests.get(server.http_url + "/v1/models", timeout=10).json()["data"]
    assert [(c["id"], c["kind"]) for c in cards] == [("succ", "chat"), (ENCODER, "embedding")]
    assert "generate" in cards[0]["capabilities"] and "generate" not in cards[1]["capabilities"]


def test_metrics_label_each_engine_with_its_model_and_readyz_is_ready(server):
    post(server, "/v1/embeddings", {"model": ENCODER, "input": "x"})
    assert requests.get(server.health_url + "/readyz", timeout=10).status_code == 200
    samples = parse_metrics(requests.get(server.health_url + "/metrics", timeout=10).text,
                            keep_model=True)
    assert 'tl_engine_queue_depth{model="succ"}' in samples
    assert samples[f'tl_encoder_requests_total{{model="{ENCODER}"}}'] >= 1


def test_the_engine_view_shows_both_engines(server):
    doc = requests.get(server.health_url + "/engine/snapshot", timeout=10).json()
    assert doc["model"] == "succ" and "blocks" in doc
    assert [(e["model"], e["max_batch_tokens"]) for e in doc["encoders"]] == [(ENCODER, 256)]


def test_the_access_log_names_each_request_s_model(server):
    post(server, "/v1/embeddings", {"model": ENCODER, "input": "logged"})
    post(server, "/v1/embeddings", {"model": "succ", "input": "logged"})
    records = [json.loads(line) for line in server.access_path.read_text().splitlines()]
    assert [r["model"] for r in records if r["path"] == "/v1/embeddings"][-2:] == [ENCODER, "succ"]


def test_a_kind_the_folder_contradicts_stops_the_start_up(succ_model_dir, minilm_dir, tmp_path):
    cfg = ServeConfig.from_toml(f"""
[engine]
model_dir = "{minilm_dir}"
http_listen = "127.0.0.1:0"
health_listen = "127.0.0.1:0"
access_log = "off"
[[models]]
id = "wrong"
model_dir = "{succ_model_dir}"
kind = "embedding"
""", env={})
    with pytest.raises(StartupError, match="wrong.*holds a chat model"):
        spawn(cfg)
