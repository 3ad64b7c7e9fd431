"""The admission gate bounds every route that queues work for the engine thread."""
from __future__ import annotations

import json

from engine.model.loader import load_model
from engine.api import EngineStats
from server.api.app import ApiApp
from server.api.launch import ChatModel
from server.state import ServerState
from server.text.served import ServedModel
from server.worker.admission import QueuePolicy
from server.worker.bridge import EngineBridge
from server.http.protocol import Request
from tests.fakes import IdleBridge


def test_embeddings_answer_429_with_retry_after_when_the_queue_is_full(succ_model_dir):
    model = load_model(succ_model_dir)
    bridge = IdleBridge(capacity=1)
    gate = bridge.admission.gate
    app = ApiApp(chats={"succ": ChatModel(ServedModel(model, "succ", 64), bridge)},
                 state=ServerState(), ping_interval_s=15.0)
    body = json.dumps({"model": "succ", "input": "ab"}).encode()
    request = Request(method="POST", path="/v1/embeddings", body=body)
    first = app.handle(request)          # prepared at once (Inline); admitted at its poll
    assert first.poll(0.0).head is None and gate.waiting == 1          # queued, slot held
    second = app.handle(request).poll(0.0)
    assert second.head.status == 429 and second.done
    assert ("Retry-After", "1") in second.head.headers
    assert json.loads(b"".join(second.chunks))["error"]["code"] == "rate_limit_exceeded"
    assert len(bridge.embedded) == 1                                  # the refused one never queued
