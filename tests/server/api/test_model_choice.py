"""Several chat models behind one ApiApp: the request's `model` picks the engine bridge, the
text layer and the sampling defaults; admission is each model's own; the request counter
carries the model a request named (only a served one: a client's unknown id never becomes a
label)."""
from __future__ import annotations

import json

import pytest

from engine.model.loader import load_model
from server.api.app import ApiApp
from server.api.defaults import SamplingDefaults
from server.api.launch import ChatModel
from server.http.protocol import Request
from server.state import ServerState
from server.text.served import ServedModel
from tests.fakes import IdleBridge


@pytest.fixture
def two(succ_model_dir):
    """ApiApp over chat models "a" (temperature default 0.5) and "b" (0.25), one queue
    place each."""
    model = load_model(succ_model_dir)
    bridges = {"a": IdleBridge(capacity=1), "b": IdleBridge(capacity=1)}
    temperature = {"a": 0.5, "b": 0.25}
    chats = {m: ChatModel(ServedModel(model, m, 64), bridges[m],
                          SamplingDefaults(temperature=temperature[m])) for m in bridges}
    return ApiApp(chats=chats, state=ServerState(), ping_interval_s=15.0), bridges


def chat(app: ApiApp, model: str):
    body = json.dumps({"model": model, "max_tokens": 2,
                       "messages": [{"role": "user", "content": "a"}]}).encode()
    return app.handle(Request(method="POST", path="/v1/chat/completions", body=body)).poll(0.0)


def test_the_model_field_picks_the_bridge_and_its_sampling_defaults(two):
    app, bridges = two
    chat(app, "b")
    chat(app, "a")
    [to_b], [to_a] = bridges["b"].added, bridges["a"].added
    assert to_b.params.temperature == 0.25 and to_a.params.temperature == 0.5


def test_a_full_queue_refuses_only_its_model_and_the_count_names_it(two):
    app, bridges = two
    assert chat(app, "b").head is None                       # queued: b's one place taken
    refused = chat(app, "b")
    assert refused.head.status == 429 and ("Retry-After", "1") in refused.head.headers
    assert chat(app, "a").head is None and len(bridges["a"].added) == 1   # a still admits
    assert app.state.metrics.requests[("chat", 429, "b")] == 1


def test_an_unknown_id_is_a_404_counted_without_a_model_label(two):
    app, _ = two
    answer = chat(app, "gone")
    assert answer.head.status == 404
    message = json.loads(b"".join(answer.chunks))["error"]["message"]
    assert "'a'" in message and "'b'" in message
    assert app.state.metrics.requests == {("chat", 404, ""): 1}


def test_the_model_list_has_every_chat_model_in_order(two):
    app, _ = two
    answer = app.handle(Request(method="GET", path="/v1/models", body=b""))
    cards = json.loads(answer.body)["data"]
    assert [(c["id"], c["kind"]) for c in cards] == [("a", "chat"), ("b", "chat")]
