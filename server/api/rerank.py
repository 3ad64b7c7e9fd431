"""Bi-encoder scoring with a sentence-embedding model: `POST /v1/rerank` and `POST /v1/score`.

The shapes are vLLM's (and Jina's / Cohere's for rerank); the scores are the cosine
similarity of the two texts' embeddings (a bi-encoder: each text embedded on its own, not a
cross-encoder reading the pair together), in [-1, 1].

    rerank {model, query, documents: [str | {"text": str}], top_n?, return_documents?}
        -> {id, model, usage, results: [{index, relevance_score, document?: {text}}]}
           sorted by relevance_score, highest first; top_n keeps the first n
    score  {model, text_1: str | [str], text_2: str | [str]}
        -> {id, object: "list", created, model, data: [{index, object: "score", score}], usage}
           1:1, 1:N (text_1 one text or a list of one) or N:N (pairwise, equal lengths)

All the texts of a call are embedded in one job on the model's encoder thread (admission
and batches as for /v1/embeddings, server/api/embeddings.py); the cosines are taken when the
answer is built (off the loop when it is large).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import numpy as np

from server.api import documents as docs
from server.api.embeddings import EmbedStream, encoder_rows, launch_embedding
from server.api.fields import bad, boolean, is_int, load_json_object, model_name
from server.api.launch import TASK_RERANK, TASK_SCORE, ApiContext
from server.door.routes import Params
from server.http.protocol import Request
from server.replies import Headers
from server.worker.encoder_thread import ENCODING_VECTORS

MAX_SCORED_TEXTS = 2048         # texts embedded for one call (as /v1/embeddings' inputs)


@dataclass(frozen=True)
class RerankSpec:
    model: str
    query: str
    documents: tuple[str, ...]
    top_n: int                  # results kept (all by default)
    return_documents: bool


@dataclass(frozen=True)
class ScoreSpec:
    model: str
    left: tuple[str, ...]       # text_1: one text (1:N) or as many as text_2 (N:N)
    right: tuple[str, ...]      # text_2


def _text(v, param: str) -> str:
    if isinstance(v, dict) and isinstance(v.get("text"), str):     # Cohere/Jina's {"text": ...}
        return v["text"]
    if not isinstance(v, str):
        raise bad(param, f"'{param}' must hold strings (or {{\"text\": ...}} objects).")
    return v


def _texts(v, param: str) -> tuple[str, ...]:
    texts = (v,) if isinstance(v, str) else tuple(v) if isinstance(v, list) else None
    if not texts:
        raise bad(param, f"'{param}' must be a string or a non-empty list of strings.")
    return tuple(_text(t, param) for t in texts)


def _bounded(count: int, param: str) -> None:
    if count > MAX_SCORED_TEXTS:
        raise bad(param, f"At most {MAX_SCORED_TEXTS} texts are scored in one call.")


def parse_rerank(body: bytes) -> RerankSpec:
    doc = load_json_object(body)
    model = model_name(doc)
    query = doc.get("query")
    if not isinstance(query, str):
        raise bad("query", "'query' must be a string.")
    if not isinstance(doc.get("documents"), list):
        raise bad("documents", "'documents' must be a non-empty list of strings.")
    documents = _texts(doc["documents"], "documents")
    _bounded(len(documents) + 1, "documents")
    top_n = doc.get("top_n")
    if top_n is not None and not (is_int(top_n) and top_n >= 1):
        raise bad("top_n", f"{top_n!r} is not valid for 'top_n': expected an integer >= 1.")
    return RerankSpec(model=model, query=query, documents=documents,
                      top_n=min(top_n or len(documents), len(documents)),
                      return_documents=boolean(doc, "return_documents", True))


def parse_score(body: bytes) -> ScoreSpec:
    doc = load_json_object(body)
    model = model_name(doc)
    left, right = _texts(doc.get("text_1"), "text_1"), _texts(doc.get("text_2"), "text_2")
    if len(left) > 1 and len(left) != len(right):
        raise bad("text_2", f"'text_1' has {len(left)} texts and 'text_2' {len(right)}: give "
                            "one text_1 (scored against every text_2) or as many as text_2 "
                            "(scored pairwise).")
    _bounded(len(left) + len(right), "text_2")
    return ScoreSpec(model=model, left=left, right=right)


def cosines(vectors: list, left: int) -> np.ndarray:
    """The cosine of each of the first `left` vectors against the rest: one left vector
    against every right one (1:N), or pairwise (N:N). -> float [len(right)]."""
    matrix = np.asarray(vectors, dtype=np.float32)                         # [left + right, H]
    norms = np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    unit = matrix / norms
    a, b = unit[:left], unit[left:]                                        # [L, H], [R, H]
    return (b @ a[0]) if left == 1 else np.einsum("rh,rh->r", a, b)


def rerank(api: ApiContext, request: Request, params: Params, extra: Headers) -> EmbedStream:
    spec = parse_rerank(request.body)
    with api.serving(spec.model, TASK_RERANK) as ctx:
        texts = (spec.query,) + spec.documents
        rows = encoder_rows(ctx.encoder.encoder, texts, None,
                            lambda i: ("query", "The query") if i == 0 else
                            ("documents", f"Document {i - 1}"))
        return launch_embedding(ctx, ctx.encoder, spec.model, rows,
                                ENCODING_VECTORS, extra, request.request_id, "rerank",
                                partial(_rerank_document, spec))


def _rerank_document(spec: RerankSpec, vectors: list, prompt_tokens: int) -> dict:
    scores = cosines(vectors, 1)
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[:spec.top_n]
    results = [{"index": i, "relevance_score": float(scores[i]),
                **({"document": {"text": spec.documents[i]}} if spec.return_documents else {})}
               for i in order]
    return {"id": docs.new_id("rerank"), "model": spec.model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
            "results": results}


def score(api: ApiContext, request: Request, params: Params, extra: Headers) -> EmbedStream:
    spec = parse_score(request.body)
    with api.serving(spec.model, TASK_SCORE) as ctx:
        n_left = len(spec.left)
        rows = encoder_rows(ctx.encoder.encoder, spec.left + spec.right, None,
                            lambda i: ("text_1", f"text_1[{i}]") if i < n_left else
                            ("text_2", f"text_2[{i - n_left}]"))
        return launch_embedding(ctx, ctx.encoder, spec.model, rows,
                                ENCODING_VECTORS, extra, request.request_id, "score",
                                partial(_score_document, spec))


def _score_document(spec: ScoreSpec, vectors: list, prompt_tokens: int) -> dict:
    scores = cosines(vectors, len(spec.left))
    return {"id": docs.new_id("score"), "object": "list", "created": int(time.time()),
            "model": spec.model,
            "data": [{"index": i, "object": "score", "score": float(s)}
                     for i, s in enumerate(scores)],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
