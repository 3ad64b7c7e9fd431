"""The embedding classes of LangChain (`langchain_openai.OpenAIEmbeddings`) and LlamaIndex
(`llama_index.embeddings.openai.OpenAIEmbedding`) against /v1/embeddings with `model` the
all-MiniLM-L6-v2 id: the vectors they hand back are the oracle's (sentence-transformers')."""
from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.helpers import server_fixture
from tests.oracle import read_jsonl

pytestmark = pytest.mark.real_model

ROWS = [r for r in read_jsonl("families/minilm-l6/embeddings.jsonl")
        if not r["truncated"] and r["text"]][:8]
MODEL = "all-minilm-l6-v2"
TOLERANCE = 1e-5


server = server_fixture("minilm_dir")


def expected(rows: list[dict]) -> np.ndarray:
    return np.array([r["embedding"] for r in rows])


def test_langchain_openai_embeddings(server):
    from langchain_openai import OpenAIEmbeddings
    # check_embedding_ctx_length=False: send the texts (not tiktoken ids of OpenAI's vocabulary)
    embedder = OpenAIEmbeddings(model=MODEL, base_url=server.http_url + "/v1", api_key="none",
                                check_embedding_ctx_length=False, chunk_size=3)
    vectors = np.asarray(embedder.embed_documents([r["text"] for r in ROWS]))   # 3 calls
    np.testing.assert_allclose(vectors, expected(ROWS), atol=TOLERANCE)
    query = np.asarray(embedder.embed_query(ROWS[2]["text"]))
    np.testing.assert_allclose(query, expected(ROWS)[2], atol=TOLERANCE)


def test_llama_index_openai_embedding(server):
    from llama_index.embeddings.openai import OpenAIEmbedding
    embedder = OpenAIEmbedding(model_name=MODEL, api_base=server.http_url + "/v1",
                               api_key="none", embed_batch_size=4, max_retries=0)
    vectors = np.asarray(embedder.get_text_embedding_batch([r["text"] for r in ROWS]))
    np.testing.assert_allclose(vectors, expected(ROWS), atol=TOLERANCE)
    query = np.asarray(embedder.get_query_embedding(ROWS[5]["text"]))
    np.testing.assert_allclose(query, expected(ROWS)[5], atol=TOLERANCE)
