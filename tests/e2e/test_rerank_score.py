"""/v1/rerank and /v1/score with all-MiniLM-L6-v2: bi-encoder cosine similarity.

The scores are checked against the oracle's own vectors (sentence-transformers' embeddings:
their dot product, as they are unit length), so a wrong pairing, order or sign fails.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.helpers import post, server_fixture
from tests.oracle import read_jsonl

pytestmark = pytest.mark.real_model

ROWS = [r for r in read_jsonl("families/minilm-l6/embeddings.jsonl") if not r["truncated"]]
MODEL = "all-minilm-l6-v2"
TOLERANCE = 1e-5


server = server_fixture("minilm_dir")


def cosine(a: dict, b: dict) -> float:
    x, y = np.array(a["embedding"]), np.array(b["embedding"])
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


def test_rerank_sorts_the_documents_by_cosine_to_the_query(server):
    query, documents = ROWS[0], ROWS[1:9]
    reply = post(server, "/v1/rerank", {"model": MODEL, "query": query["text"],
                                        "documents": [d["text"] for d in documents]})
    assert reply.status_code == 200, reply.text
    doc = reply.json()
    expected = sorted(((cosine(query, d), i) for i, d in enumerate(documents)), reverse=True)
    assert [r["index"] for r in doc["results"]] == [i for _, i in expected]
    for result, (score, i) in zip(doc["results"], expected):
        assert abs(result["relevance_score"] - score) <= TOLERANCE
        assert result["document"] == {"text": documents[i]["text"]}
    assert doc["model"] == MODEL and doc["id"].startswith("rerank-")
    assert doc["usage"]["prompt_tokens"] == sum(r["n_tokens"] for r in [query] + documents)


def test_rerank_top_n_and_without_documents_and_text_objects(server):
    reply = post(server, "/v1/rerank", {"model": MODEL, "query": "a cat on a mat",
                                        "documents": [{"text": "The cat sits on the mat."},
                                                      "Paris is the capital of France.",
                                                      "I love machine learning!"],
                                        "top_n": 1, "return_documents": False})
    assert reply.status_code == 200, reply.text
    [best] = reply.json()["results"]                     # top_n = 1
    assert set(best) == {"index", "relevance_score"}     # no document
    assert best["index"] == 0 and 0.5 < best["relevance_score"] <= 1.0


def test_rerank_top_n_keeps_the_best_documents_wherever_they_stand(server):
    documents = ["Paris is the capital of France.", "A cat lies on a mat.",
                 "Stock prices fell sharply today.", "The cat sits on the mat.",
                 "I love machine learning!"]
    body = {"model": MODEL, "query": "a cat on a mat", "documents": documents}
    full = post(server, "/v1/rerank", body).json()["results"]
    scores = [r["relevance_score"] for r in full]
    assert len(full) == 5 and scores == sorted(scores, reverse=True)
    top = post(server, "/v1/rerank", dict(body, top_n=2)).json()["results"]
    assert {r["index"] for r in top} == {1, 3}            # the two cats, not the first two
    assert top == full[:2]
    assert top[0]["document"] == {"text": documents[top[0]["index"]]}


def test_score_one_to_many_and_pairwise(server):
    a, b, c = ROWS[2], ROWS[3], ROWS[4]
    one_to_many = post(server, "/v1/score", {"model": MODEL, "text_1": a["text"],
                                             "text_2": [b["text"], c["text"]]})
    assert one_to_many.status_code == 200, one_to_many.text
    doc = one_to_many.json()
    assert doc["object"] == "list" and [d["object"] for d in doc["data"]] == ["score"] * 2
    assert [d["index"] for d in doc["data"]] == [0, 1]
    assert [d["score"] for d in doc["data"]] == pytest.approx([cosine(a, b), cosine(a, c)],
                                                              abs=TOLERANCE)
    pairwise = post(server, "/v1/score", {"model": MODEL, "text_1": [a["text"], b["text"]],
                                          "text_2": [c["text"], a["text"]]}).json()
    assert [d["score"] for d in pairwise["data"]] == pytest.approx([cosine(a, c), cosine(b, a)],
                                                                   abs=TOLERANCE)
    single = post(server, "/v1/score", {"model": MODEL, "text_1": a["text"],
                                        "text_2": a["text"]}).json()
    assert single["data"][0]["score"] == pytest.approx(1.0, abs=TOLERANCE)


@pytest.mark.parametrize("path, body, param", [
    ("/v1/score", {"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, "text_2"),
    ("/v1/score", {"text_1": "a"}, "text_2"),
    ("/v1/rerank", {"query": "a", "documents": []}, "documents"),
    ("/v1/rerank", {"query": 3, "documents": ["b"]}, "query"),
    ("/v1/rerank", {"query": "a", "documents": ["b"], "top_n": 0}, "top_n"),
    ("/v1/rerank", {"query": "a", "documents": ["b", "word " * 300]}, "documents"),
])
def test_bad_requests_are_400_in_the_openai_shape_naming_the_field(server, path, body, param):
    reply = post(server, path, dict(body, model=MODEL))
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    if "word " in str(body):
        assert "Document 1 has" in error["message"]
