"""Embeddings share the engine's steps (engine/core/embedding.py) over real sockets, on the
tiny random Llama: a running chat keeps producing tokens while a 256-input embeddings call
runs, and LangChain's OpenAIEmbeddings gets the same vectors as the dense reference.

LangChain's `OpenAIEmbeddings` is used with `check_embedding_ctx_length=False`: by default
it tokenizes with a downloaded tiktoken table and sends those (foreign) token ids."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import requests

from engine.api import EngineConfig
from engine.model import llama
from engine.model.loader import load_model
from tests.e2e.helpers import TIMEOUT_S, chat_body, post, server_fixture

BUDGET_TOKENS = 64                     # max_batched_tokens: 256 inputs take dozens of steps


@pytest.fixture(scope="module")
def model_id(tiny_llama_dir):
    return tiny_llama_dir.name


# 5 ms per step: packed embeddings cost the chat one step per token; a serial embed (the
# fault) holds the engine thread for the whole batch with no step in between
server = server_fixture("tiny_llama_dir", step_delay_s=0.005,
                        engine=EngineConfig(max_batched_tokens=BUDGET_TOKENS, prefill_chunk=32))


def reference(tiny_llama_dir, texts: list[str]) -> np.ndarray:
    model = load_model(tiny_llama_dir)
    rows = []
    for text in texts:
        hidden = llama.hidden_states(model.config, model.weights, model.tokenizer.encode(text))
        mean = hidden.mean(axis=0)                                  # [T, d] -> [d]
        rows.append(mean / np.linalg.norm(mean))
    return np.stack(rows)                                           # [n, d]


@pytest.mark.timing
def test_a_chat_keeps_streaming_while_256_inputs_are_embedded(server, model_id):
    """Timed on the wall clock (the `timing` group): how long the chat's tokens stop for is
    the behaviour, and what tells a packed batch from a serial one."""
    arrivals: list[float] = []
    decoding = threading.Event()

    def stream_chat():
        body = chat_body("go", model=model_id, max_tokens=400, temperature=0, ignore_eos=True,
                         stream=True)
        with requests.post(server.http_url + "/v1/chat/completions", json=body, stream=True,
                           timeout=TIMEOUT_S) as r:
            for line in r.iter_lines():
                if line.startswith(b"data: {"):
                    arrivals.append(time.monotonic())
                    if len(arrivals) == 3:
                        decoding.set()
    reader = threading.Thread(target=stream_chat)
    reader.start()
    assert decoding.wait(TIMEOUT_S)                # the chat is decoding
    texts = [f"document number {i} about a topic" for i in range(256)]
    started = time.monotonic()
    r = post(server, "/v1/embeddings", {"model": model_id, "input": texts})
    ended = time.monotonic()
    reader.join(TIMEOUT_S)
    assert r.status_code == 200 and len(r.json()["data"]) == 256
    during = [t for t in arrivals if started < t < ended]
    # one forward per input between steps would freeze the chat for the whole call; packed
    # into the steps, the chat gets a token in every step the embeddings run in
    assert len(during) >= 10, (len(during), ended - started)
    # Serial embedding freezes the chat for (nearly) the whole call: one gap ~ the call. The
    # loop thread's own work for the call (tokenizing 256 inputs, serializing 256 vectors) is
    # one stall of tens of ms that a short call makes a large fraction of it, so the bound is
    # half the call, which the serial engine fails and the packed one passes with room.
    gaps = np.diff([started] + during)
    assert gaps.max() < (ended - started) / 2


def test_langchain_embed_documents_and_query(server, model_id, tiny_llama_dir):
    from langchain_openai import OpenAIEmbeddings
    embedder = OpenAIEmbeddings(model=model_id, base_url=server.http_url + "/v1", api_key="none",
                                check_embedding_ctx_length=False, chunk_size=100)
    texts = [f"short text {i}" for i in range(300)]
    vectors = np.asarray(embedder.embed_documents(texts))           # 3 calls of 100
    expected = reference(tiny_llama_dir, texts)
    assert vectors.shape == expected.shape
    np.testing.assert_allclose(vectors, expected, atol=1e-4)
    query = np.asarray(embedder.embed_query("short text 7"))
    np.testing.assert_allclose(query, expected[7], atol=1e-4)
