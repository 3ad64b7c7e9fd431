"""A sentence-embedding model served alone: `--model-dir` the all-MiniLM-L6-v2 folder.

/v1/embeddings answers with the encoder's vectors (the oracle's, to 1e-5), in float and
base64, with the token count as usage; an over-long input is a 400 naming its index and
token count unless `truncate_prompt_tokens` asks for the cut; the generation routes
refuse the model by name, saying what it serves; /v1/models, /healthz, /metrics
describe it.
"""
from __future__ import annotations

import base64

import numpy as np
import pytest
import requests

from server.serve import config_from_args, parse_args
from tests.e2e.helpers import post, server_fixture
from tests.oracle import read_jsonl

pytestmark = pytest.mark.real_model

ROWS = read_jsonl("families/minilm-l6/embeddings.jsonl")
MODEL = "all-minilm-l6-v2"
MAX_ABS_DIFF = 1e-5


server = server_fixture("minilm_dir")


def oracle(rows: list[dict]) -> np.ndarray:
    return np.array([r["embedding"] for r in rows], dtype=np.float32)      # [n, 384]


def test_the_command_line_serves_the_folder_under_its_name(minilm_dir):
    cfg = config_from_args(parse_args(["--model-dir", str(minilm_dir)]), env={})
    assert cfg.model_id == MODEL


def test_float_vectors_are_the_oracle_s_and_usage_counts_the_word_pieces(server):
    short = [r for r in ROWS if not r["truncated"]]
    reply = post(server, "/v1/embeddings", {"model": MODEL, "input": [r["text"] for r in short]})
    assert reply.status_code == 200, reply.text
    doc = reply.json()
    assert doc["model"] == MODEL and [d["index"] for d in doc["data"]] == list(range(len(short)))
    vectors = np.array([d["embedding"] for d in doc["data"]], dtype=np.float32)
    assert np.abs(vectors - oracle(short)).max() <= MAX_ABS_DIFF
    assert doc["usage"]["prompt_tokens"] == sum(r["n_tokens"] for r in short)


def test_base64_vectors_are_the_same_float32_bytes(server):
    row = ROWS[0]
    reply = post(server, "/v1/embeddings", {"model": MODEL, "input": row["text"],
                                            "encoding_format": "base64"})
    assert reply.status_code == 200, reply.text
    raw = base64.b64decode(reply.json()["data"][0]["embedding"])
    vector = np.frombuffer(raw, dtype="<f4")
    assert vector.shape == (384,) and np.abs(vector - oracle([row])[0]).max() <= MAX_ABS_DIFF


def test_token_id_inputs_are_embedded_as_given(server):
    row = ROWS[1]
    reply = post(server, "/v1/embeddings", {"model": MODEL, "input": [row["ids"]]})
    assert reply.status_code == 200, reply.text
    vector = np.array(reply.json()["data"][0]["embedding"], dtype=np.float32)
    assert np.abs(vector - oracle([row])[0]).max() <= MAX_ABS_DIFF


def test_an_over_long_input_is_a_400_naming_its_index_and_token_count(server):
    long_row = next(r for r in ROWS if r["truncated"])
    reply = post(server, "/v1/embeddings", {"model": MODEL,
                                            "input": ["short one", long_row["text"]]})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "input" and error["code"] == "context_length_exceeded"
    assert "Input 1 has" in error["message"]
    assert str(long_row["n_tokens_untruncated"]) in error["message"]
    assert "256" in error["message"]


def test_truncate_prompt_tokens_cuts_as_sentence_transformers_does(server):
    long_row = next(r for r in ROWS if r["truncated"])
    reply = post(server, "/v1/embeddings", {"model": MODEL, "input": long_row["text"],
                                            "truncate_prompt_tokens": -1})
    assert reply.status_code == 200, reply.text
    doc = reply.json()
    assert doc["usage"]["prompt_tokens"] == 256
    vector = np.array(doc["data"][0]["embedding"], dtype=np.float32)
    assert np.abs(vector - oracle([long_row])[0]).max() <= MAX_ABS_DIFF


def test_a_smaller_truncation_keeps_cls_the_first_pieces_and_sep(server):
    row = ROWS[0]                                        # 8 tokens: [CLS] 6 pieces [SEP]
    cut = post(server, "/v1/embeddings", {"model": MODEL, "input": row["text"],
                                          "truncate_prompt_tokens": 5})
    ids = row["ids"][:4] + row["ids"][-1:]
    whole = post(server, "/v1/embeddings", {"model": MODEL, "input": [ids]})
    assert cut.status_code == whole.status_code == 200
    assert cut.json()["usage"]["prompt_tokens"] == 5
    assert cut.json()["data"][0]["embedding"] == whole.json()["data"][0]["embedding"]
    bad = post(server, "/v1/embeddings", {"model": MODEL, "input": "x",
                                          "truncate_prompt_tokens": 0})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "truncate_prompt_tokens"


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/completions", {"prompt": "hi"}),
    ("/v1/responses", {"input": "hi"}),
])
def test_generation_routes_refuse_the_model_by_name_saying_what_it_serves(server, path, body):
    reply = post(server, path, dict(body, model=MODEL))
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "model"
    assert MODEL in error["message"] and "/v1/embeddings" in error["message"]


def test_an_unknown_model_stays_a_404(server):
    reply = post(server, "/v1/embeddings", {"model": "nope", "input": "x"})
    assert reply.status_code == 404 and MODEL in reply.json()["error"]["message"]


def test_the_model_list_says_what_it_can_do(server):
    cards = requests.get(server.http_url + "/v1/models", timeout=10).json()["data"]
    assert [(c["id"], c["kind"], c["max_model_len"]) for c in cards] == [(MODEL, "embedding", 256)]
    assert set(cards[0]["capabilities"]) == {"embeddings", "rerank", "score", "tokenize"}
    one = requests.get(server.http_url + f"/v1/models/{MODEL}", timeout=10).json()
    assert one == cards[0]


def test_health_and_metrics_describe_the_encoder(server):
    post(server, "/v1/embeddings", {"model": MODEL, "input": "counted"})
    assert requests.get(server.health_url + "/healthz", timeout=10).status_code == 200
    assert requests.get(server.health_url + "/readyz", timeout=10).status_code == 200
    text = requests.get(server.health_url + "/metrics", timeout=10).text
    line = next(l for l in text.splitlines()
                if l.startswith(f'tl_encoder_requests_total{{model="{MODEL}"}}'))
    assert float(line.split()[-1]) >= 1


def test_tokenize_uses_the_wordpiece_vocabulary_as_hugging_face_does(server):
    """/v1/tokenize with the encoder: its WordPiece ids, [CLS] ... [SEP] by default (what
    it embeds) and without them on request, exact against the oracle's cases."""
    for case in read_jsonl("families/minilm-l6/tokenize_cases.jsonl"):
        whole = post(server, "/v1/tokenize", {"model": MODEL, "prompt": case["text"]})
        assert whole.status_code == 200, whole.text
        assert whole.json()["tokens"] == case["ids_with_special"], case["text"]
        assert whole.json()["max_model_len"] == 256
        bare = post(server, "/v1/tokenize", {"model": MODEL, "prompt": case["text"],
                                             "add_special_tokens": False})
        assert bare.json()["tokens"] == case["ids_no_special"], case["text"]


def test_detokenize_joins_word_pieces_and_a_chat_is_refused(server):
    case = read_jsonl("families/minilm-l6/tokenize_cases.jsonl")[0]
    back = post(server, "/v1/detokenize", {"model": MODEL, "tokens": case["ids_no_special"]})
    assert back.status_code == 200 and back.json()["prompt"] == case["decode_skip_special"]
    past = post(server, "/v1/detokenize", {"model": MODEL, "tokens": [30_522]})
    assert past.status_code == 400 and "30522" in past.json()["error"]["message"]
    chat = post(server, "/v1/tokenize", {"model": MODEL,
                                         "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "messages"
    assert MODEL in chat.json()["error"]["message"]


def test_the_engine_view_of_an_embedding_only_server_shows_its_encoder(server):
    doc = requests.get(server.health_url + "/engine/snapshot", timeout=10).json()
    assert doc["model"] is None and doc["engines"] == []
    assert [e["model"] for e in doc["encoders"]] == [MODEL]
