"""GenerationStream without sockets or an engine: a ticket's events in, a response out."""
from __future__ import annotations

import json

from engine.api import GenRequest
from server import documents as docs
from server.bridge import Failed, Invalid, Ticket, TooLong
from server.openai import GenSpec
from server.streams import GenerationStream, StreamContext


class RecordingBridge:
    def __init__(self):
        self.aborted = []

    def abort(self, ticket):
        self.aborted.append(ticket)


def make_stream(ticket: Ticket) -> GenerationStream:
    statuses = []
    ctx = StreamContext(bridge=RecordingBridge(), tokenizer=None, ping_interval_s=15.0,
                        on_status=lambda route, status: statuses.append(status),
                        on_finish=lambda **kw: None)
    return GenerationStream(ctx=ctx, ticket=ticket, spec=GenSpec(kind="completion", model="m"),
                            header=docs.Header("cmpl-1", 0, "m"), prompt_tokens=1,
                            route="completions", headers=(), arrival_s=0.0)


def _answer(event) -> tuple[int, dict]:
    ticket = Ticket(GenRequest(prompt=(1,)), None)
    ticket.events.append(event)
    ticket.is_finished = True                     # as the bridge leaves a refused ticket
    out = make_stream(ticket).poll(0.0)
    assert out.done
    return out.head.status, json.loads(b"".join(out.chunks))["error"]


def test_engine_refusals_are_400s_of_their_kind_and_failures_are_500s():
    status, error = _answer(TooLong("prompt does not fit in the KV cache"))
    assert (status, error["code"]) == (400, "context_length_exceeded")
    status, error = _answer(Invalid("a request needs at least one prompt token"))
    assert (status, error["type"], error["code"]) == (400, "invalid_request_error", None)
    status, error = _answer(Failed("engine refused the request: bug"))
    assert status == 500 and error["type"] == "server_error"
