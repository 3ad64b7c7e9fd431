"""GenerationStream without sockets or an engine: a ticket's events in, a response out."""
from __future__ import annotations

import json

from engine.api import GenRequest
from server import documents as docs
from server.bridge import Rejected, Ticket
from server.openai import GenSpec
from server.streams import GenerationStream, StreamContext


class RecordingBridge:
    def __init__(self):
        self.aborted = []

    def abort(self, ticket):
        self.aborted.append(ticket)


def make_stream(ticket: Ticket, *, queue_capacity: int) -> GenerationStream:
    statuses = []
    ctx = StreamContext(bridge=RecordingBridge(), tokenizer=None, ping_interval_s=15.0,
                        queue_deadline_ms=30_000, queue_capacity=queue_capacity,
                        on_status=lambda route, status: statuses.append(status),
                        on_finish=lambda **kw: None)
    return GenerationStream(ctx=ctx, ticket=ticket, spec=GenSpec(kind="completion", model="m"),
                            header=docs.Header("cmpl-1", 0, "m"), prompt_tokens=1,
                            route="completions", headers=(), arrival_s=0.0)


def test_engine_rejection_is_a_429_naming_the_real_queue_capacity():
    ticket = Ticket(GenRequest(prompt=(1,)), None)
    ticket.events.append(Rejected("waiting queue full (7 requests)"))
    ticket.is_finished = True                     # as the bridge leaves a rejected ticket
    out = make_stream(ticket, queue_capacity=7).poll(0.0)
    assert out.done and out.head.status == 429
    assert ("Retry-After", "1") in out.head.headers
    error = json.loads(b"".join(out.chunks))["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert "(7 waiting requests)" in error["message"], error["message"]
