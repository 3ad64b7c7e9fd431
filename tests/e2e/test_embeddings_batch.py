"""Embeddings share the engine's steps (engine/core/embedding.py) over real sockets, on the
tiny random Llama: a running chat gets a token in every step a 256-input embeddings call
runs in (counted on the engine's steps, not timed: bench/serving_stalls.py times the chat's
gaps), and LangChain's OpenAIEmbeddings gets the same vectors as the dense reference.

LangChain's `OpenAIEmbeddings` is used with `check_embedding_ctx_length=False`: by default
it tokenizes with a downloaded tiktoken table and sends those (foreign) token ids."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pytest
import requests

from engine.api import EngineConfig, TokenOut
from engine.model import llama
from engine.model.loader import load_model
from tests.e2e.helpers import TIMEOUT_S, chat_body, post, running_server
from tests.fakes import WrappedEngine

BUDGET_TOKENS = 64                     # max_batched_tokens: 256 inputs take dozens of steps
# 5 ms per step: the chat (400 tokens) outlasts the embeddings call many times over
STEP_DELAY_S = 0.005


@dataclass(frozen=True)
class StepSeen:
    """One engine step as EmbedSteps saw it."""
    embedding_open: bool               # an embeddings job was added and its vectors not yet taken
    tokens: int                        # TokenOuts the step gave (the chat's: it runs alone)


class EmbedSteps(WrappedEngine):
    """The engine, noting per step whether an embeddings job was open and how many tokens
    the step gave (engine thread; the test reads `steps` once the call has answered)."""

    def __init__(self, engine):
        super().__init__(engine)
        self._open_jobs: set[int] = set()
        self._steps: list[StepSeen] = []

    @property
    def steps(self) -> list[StepSeen]:
        return list(self._steps)

    def add_embedding(self, inputs) -> int:
        job_id = self._engine.add_embedding(inputs)
        self._open_jobs.add(job_id)
        return job_id

    def take_embeddings(self) -> list:
        done = self._engine.take_embeddings()
        self._open_jobs -= {d.job_id for d in done}
        return done

    def step(self):
        is_open = bool(self._open_jobs)
        outs = self._engine.step()
        self._steps.append(StepSeen(is_open, sum(isinstance(o, TokenOut) for o in outs)))
        return outs


class Watch:
    """The wrap_engine seam, keeping the EmbedSteps it made."""

    def __init__(self):
        self.engine: EmbedSteps | None = None

    def __call__(self, engine) -> EmbedSteps:
        self.engine = EmbedSteps(engine)
        return self.engine


@pytest.fixture(scope="module")
def model_id(tiny_llama_dir):
    return tiny_llama_dir.name


@pytest.fixture(scope="module")
def watch():
    return Watch()


@pytest.fixture(scope="module")
def server(tiny_llama_dir, watch):
    with running_server(tiny_llama_dir, wrap_engine=watch, step_delay_s=STEP_DELAY_S,
                        engine=EngineConfig(max_batched_tokens=BUDGET_TOKENS,
                                            prefill_chunk=32)) as handle:
        yield handle


def reference(tiny_llama_dir, texts: list[str]) -> np.ndarray:
    model = load_model(tiny_llama_dir)
    rows = []
    for text in texts:
        hidden = llama.hidden_states(model.config, model.weights, model.tokenizer.encode(text))
        mean = hidden.mean(axis=0)                                  # [T, d] -> [d]
        rows.append(mean / np.linalg.norm(mean))
    return np.stack(rows)                                           # [n, d]


def test_a_chat_gets_a_token_in_every_step_256_inputs_are_embedded_in(server, model_id, watch):
    """Packed into the steps, the call's inputs take at least prompt_tokens / BUDGET_TOKENS
    steps, and the chat decodes in each of them; embedded serially (one forward per input
    while the chat waits) the job would be open for one step at most."""
    decoding, stop = threading.Event(), threading.Event()

    def stream_chat():
        body = chat_body("go", model=model_id, max_tokens=400, temperature=0, ignore_eos=True,
                         stream=True)
        with requests.post(server.http_url + "/v1/chat/completions", json=body, stream=True,
                           timeout=TIMEOUT_S) as r:
            for n, line in enumerate(ln for ln in r.iter_lines() if ln.startswith(b"data: {")):
                if n == 2:
                    decoding.set()
                if stop.is_set():
                    return                                  # closing the stream ends the chat
    reader = threading.Thread(target=stream_chat)
    reader.start()
    try:
        assert decoding.wait(TIMEOUT_S)                # the chat is decoding
        before = len(watch.engine.steps)
        texts = [f"document number {i} about a topic" for i in range(256)]
        r = post(server, "/v1/embeddings", {"model": model_id, "input": texts})
        steps = watch.engine.steps[before:]
    finally:
        stop.set()
        reader.join(TIMEOUT_S)
    assert r.status_code == 200 and len(r.json()["data"]) == 256
    open_steps = [s for s in steps if s.embedding_open]
    assert len(open_steps) >= r.json()["usage"]["prompt_tokens"] // BUDGET_TOKENS > 1
    assert all(s.tokens >= 1 for s in open_steps), [s.tokens for s in open_steps]


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
