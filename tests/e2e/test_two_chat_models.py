"""Two chat models in one server (`[[models]]`): succ (the byte-successor model: after byte
b comes b + 1) and the tiny random Llama, each its own engine thread on the shared compute
turn, beside nothing else.

The request's `model` picks the engine, and each answers with its own outputs while the
other streams (succ's known successor bytes; the tiny Llama's answer as it gives it when
served alone); admission is per model (succ's full queue is a 429 while the tiny Llama still
admits); /v1/models lists both, /readyz is ready with both and names a model whose engine
died; /metrics labels every engine sample and the request counter with the model, each
family once; the engine snapshot shows the engine `?model=` names; tokenize uses each
model's own tokenizer; a drain finishes both models' streams; tlserve serves the models
TL_ENGINE__MODELS names. Succ's steps are slowed (StepDelay) so its streams run long enough
to watch; the tests wait on what they observe.
"""
from __future__ import annotations

import json
import threading

import pytest
import requests

from server.config import ServeConfig
from server.serve import spawn
from engine.api import load_model
from tests.e2e.helpers import (TIMEOUT_S, chat_body, chat_stream_text, child_server,
                               open_stream, parse_metrics, post, read_until_closed_or,
                               running_server, send_stream, stream_chunks, two_chat_config)
from tests.fakes import StepDelay, WrappedEngine
from tests.polling import wait_for

SUCC, TINY = "succ", "tiny"
SUCC_STEP_DELAY_S = 0.05        # succ's streams take seconds: long enough to watch them run
DONE = b"data: [DONE]\n\n"


def config(succ_dir, tiny_dir) -> ServeConfig:
    """succ first ([engine]: one batch slot, one queue place, no speculation: its streams
    must take one slowed step a token, and a repeated prompt's answer would otherwise be
    drafted whole from the suffix store), the tiny Llama in [[models]] with its own, larger
    queue."""
    return two_chat_config(succ_dir, tiny_dir, first="""
speculative = "none"
max_num_seqs = 1
queue_capacity = 1
queue_deadline_ms = 600000
kv_cache_mib = 8""", second="""
kind = "chat"
max_num_seqs = 4
queue_capacity = 8
kv_cache_mib = 8""")


def slow_first_engine(engine_seen: list):
    """The EngineWrapper for `spawn`: the first engine loaded (succ's) slowed, the others
    as they are; every wrapped engine kept in `engine_seen`, in load order."""
    def wrap(engine):
        wrapped = StepDelay(engine, SUCC_STEP_DELAY_S) if not engine_seen else engine
        engine_seen.append(wrapped)
        return wrapped
    return wrap


@pytest.fixture(scope="module")
def server(succ_model_dir, tiny_llama_dir):
    handle = spawn(config(succ_model_dir, tiny_llama_dir), slow_first_engine([]))
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def tiny_alone(tiny_llama_dir):
    """The tiny Llama's answers as a one-model server gives them: the reference."""
    with running_server(tiny_llama_dir, model_id=TINY) as handle:
        yield handle


def succ_stream(max_tokens: int) -> dict:
    # "A" (65): succ answers "B", "C", ... one byte a token, all ASCII for 61 tokens
    return chat_body("A", model=SUCC, max_tokens=max_tokens, temperature=0, stream=True,
                     ignore_eos=True)


def samples(server) -> dict[str, float]:
    text = requests.get(server.health_url + "/metrics", timeout=TIMEOUT_S).text
    return parse_metrics(text, keep_model=True)


def active(server, model: str) -> float:
    return samples(server).get(f'tl_engine_active_sequences{{model="{model}"}}', -1)


def streamed_text(raw: bytes) -> str:
    """The content of a raw (chunked) chat stream: its `data: {...}` lines' deltas."""
    return chat_stream_text([json.loads(line[len(b"data: "):]) for line in raw.split(b"\n")
                             if line.startswith(b"data: {")])


def test_each_model_answers_with_its_own_outputs_while_the_other_streams(server, tiny_alone):
    tiny_body = chat_body("Hello there", model=TINY, max_tokens=8, temperature=0, stream=True)
    reference = requests.post(tiny_alone.http_url + "/v1/chat/completions", json=tiny_body,
                              timeout=TIMEOUT_S)
    expected_tiny = chat_stream_text(stream_chunks(reference)[0])
    sock, received = open_stream(server, succ_stream(40))
    assert wait_for(lambda: active(server, SUCC) == 1)
    tiny = requests.post(server.http_url + "/v1/chat/completions", json=tiny_body,
                         timeout=TIMEOUT_S)
    chunks, done = stream_chunks(tiny)
    assert done and chat_stream_text(chunks) == expected_tiny and expected_tiny
    assert {c["model"] for c in chunks} == {TINY}
    assert active(server, SUCC) == 1                # succ's stream still runs beside it
    raw = read_until_closed_or(sock, DONE, received)
    sock.close()
    assert streamed_text(raw) == "".join(chr(c) for c in range(ord("B"), ord("B") + 40))
    assert b'"model":"succ"' in raw and b'"model":"tiny"' not in raw


def test_admission_is_per_model_a_full_queue_refuses_only_its_model(server):
    running, received = open_stream(server, succ_stream(40))     # succ's one batch slot
    assert wait_for(lambda: active(server, SUCC) == 1)
    queued = send_stream(server, succ_stream(2))                    # succ's one queue place
    assert wait_for(lambda: samples(server).get('tl_engine_queue_depth{model="succ"}') == 1)
    refused = post(server, "/v1/chat/completions", succ_stream(2))
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    admitted = post(server, "/v1/chat/completions",
                    chat_body("x", model=TINY, max_tokens=2, temperature=0))
    assert admitted.status_code == 200 and admitted.json()["model"] == TINY
    assert active(server, SUCC) == 1                # the refusal came while succ was full
    for sock, already in ((running, received), (queued, b"")):
        assert DONE in read_until_closed_or(sock, DONE, already)
        sock.close()
    counted = samples(server)
    assert counted['tl_http_requests_total{model="succ",route="chat",status="429"}'] >= 1
    assert counted['tl_http_requests_total{model="tiny",route="chat",status="200"}'] >= 1


def test_the_model_list_and_readyz_cover_both(server):
    cards = requests.get(server.http_url + "/v1/models", timeout=TIMEOUT_S).json()["data"]
    assert [(c["id"], c["kind"]) for c in cards] == [(SUCC, "chat"), (TINY, "chat")]
    assert all("generate" in c["capabilities"] for c in cards)
    one = requests.get(server.http_url + f"/v1/models/{TINY}", timeout=TIMEOUT_S)
    assert one.status_code == 200 and one.json()["id"] == TINY
    assert requests.get(server.health_url + "/readyz", timeout=TIMEOUT_S).status_code == 200


def test_an_unknown_model_is_404_naming_both(server):
    reply = post(server, "/v1/chat/completions", chat_body("a", model="gone"))
    assert reply.status_code == 404
    assert f"'{SUCC}'" in reply.json()["error"]["message"]
    assert f"'{TINY}'" in reply.json()["error"]["message"]


def test_metrics_label_every_engine_sample_with_its_model_each_family_once(server):
    text = requests.get(server.health_url + "/metrics", timeout=TIMEOUT_S).text
    assert text.count("# TYPE tl_engine_queue_depth gauge") == 1
    assert text.count("# HELP tl_engine_steps_total ") == 1
    found = parse_metrics(text, keep_model=True)
    for model in (SUCC, TINY):
        for name in ("tl_engine_queue_depth", "tl_engine_active_sequences",
                     "tl_engine_kv_cache_utilization", "tl_engine_steps_total"):
            assert f'{name}{{model="{model}"}}' in found
    assert not [k for k in found if k.startswith("tl_engine_") and "model=" not in k]


def test_the_engine_snapshot_shows_the_engine_named(server):
    def snapshot(query: str = "") -> requests.Response:
        return requests.get(server.health_url + "/engine/snapshot" + query, timeout=TIMEOUT_S)
    first = snapshot().json()
    assert first["model"] == SUCC and first["engines"] == [SUCC, TINY] and "blocks" in first
    tiny = snapshot(f"?model={TINY}").json()
    assert tiny["model"] == TINY and "blocks" in tiny
    assert tiny["blocks"]["num_blocks"] == len(tiny["blocks"]["states"])
    assert snapshot("?model=gone").status_code == 404


def test_tokenize_and_detokenize_use_each_model_s_own_tokenizer(server, succ_model_dir,
                                                              tiny_llama_dir):
    text = "Hello there"
    for model, folder in ((SUCC, succ_model_dir), (TINY, tiny_llama_dir)):
        expected = load_model(folder).tokenizer.encode(text)
        reply = post(server, "/v1/tokenize", {"model": model, "prompt": text,
                                              "add_special_tokens": False})
        assert reply.status_code == 200 and reply.json()["tokens"] == expected
        back = post(server, "/v1/detokenize", {"model": model, "tokens": expected})
        assert back.status_code == 200 and back.json()["prompt"] == text
    ids = {model: post(server, "/v1/tokenize", {"model": model, "prompt": text}).json()["tokens"]
           for model in (SUCC, TINY)}
    assert ids[SUCC] != ids[TINY]


class DiesOnRequest(WrappedEngine):
    """The engine thread dies (has_work raises, outside the per-step guard) once `kill` is
    set and the bridge next looks for work."""

    def __init__(self, engine):
        super().__init__(engine)
        self.kill = threading.Event()

    def has_work(self):
        if self.kill.is_set():
            raise RuntimeError("injected engine thread death")
        return self._engine.has_work()


def test_readyz_and_healthz_name_the_model_whose_engine_died(succ_model_dir, tiny_llama_dir):
    seen: list = []
    handle = spawn(config(succ_model_dir, tiny_llama_dir),
                   lambda engine: seen.append(DiesOnRequest(engine)) or seen[-1])
    try:
        assert requests.get(handle.health_url + "/readyz", timeout=TIMEOUT_S).status_code == 200
        seen[1].kill.set()                                    # the tiny Llama's engine
        post(handle, "/v1/chat/completions", chat_body("a", model=TINY, max_tokens=2))
        ready = requests.get(handle.health_url + "/readyz", timeout=TIMEOUT_S)
        assert ready.status_code == 503 and TINY in ready.json()["error"]["message"]
        health = requests.get(handle.health_url + "/healthz", timeout=TIMEOUT_S)
        assert health.status_code == 503 and TINY in health.json()["error"]["message"]
        still = post(handle, "/v1/chat/completions", chat_body("a", model=SUCC, max_tokens=2,
                                                                 temperature=0))
        assert still.status_code == 200 and still.json()["choices"][0]["message"]["content"] == "bc"
    finally:
        handle.stop()


def test_a_drain_finishes_every_model_s_streams(succ_model_dir, tiny_llama_dir):
    handle = spawn(config(succ_model_dir, tiny_llama_dir),
                   lambda engine: StepDelay(engine, SUCC_STEP_DELAY_S))    # both run long
    try:
        opened = [open_stream(handle, succ_stream(20)),
                  open_stream(handle, chat_body("Hello", model=TINY, max_tokens=20,
                                                temperature=0, stream=True, ignore_eos=True))]
        assert wait_for(lambda: active(handle, SUCC) == 1 and active(handle, TINY) == 1)
        handle.drain()
        bodies = [read_until_closed_or(sock, DONE, received) for sock, received in opened]
        for sock, _ in opened:
            sock.close()
        assert all(DONE in body and b'"error"' not in body for body in bodies)
        assert all(body.count(b'"finish_reason":"length"') == 1 for body in bodies)
        assert streamed_text(bodies[0]) == "".join(chr(c) for c in range(ord("B"), ord("B") + 20))
    finally:
        handle.stop()


def test_tlserve_serves_the_models_tl_engine_models_names(succ_model_dir, tiny_llama_dir):
    """The command line with no config file: TL_ENGINE__MODELS adds the tiny Llama beside
    --model-dir's succ, both answering."""
    models = json.dumps([{"id": TINY, "model_dir": str(tiny_llama_dir), "kind": "chat"}])
    with child_server(succ_model_dir, env={"TL_ENGINE__MODELS": models}) as child:
        cards = requests.get(child.http_url + "/v1/models", timeout=TIMEOUT_S).json()["data"]
        assert [(c["id"], c["kind"]) for c in cards] == [(SUCC, "chat"), (TINY, "chat")]
        for model in (SUCC, TINY):
            reply = post(child, "/v1/chat/completions",
                         chat_body("a", model=model, max_tokens=2, temperature=0))
            assert reply.status_code == 200 and reply.json()["model"] == model
