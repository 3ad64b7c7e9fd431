"""Helpers for the stream-shell tests of the API: a GenerationStream on a recording bridge,
and a Responses SSE body read back as openai-python's own event objects."""
from __future__ import annotations

import json

import pydantic
from openai.types.responses import ResponseStreamEvent

from engine.api import GenRequest
from server.api import documents as docs
from server.api.streams import GenerationStream, StreamContext
from server.worker.bridge import Ticket
from tests.fakes import FakeTokenizer, RecordingBridge

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)


def recorded_stream(spec, header: docs.Header, render, table: dict[int, bytes]):
    """A GenerationStream of one ticket (token bytes from `table`) on a recording bridge."""
    bridge = RecordingBridge()
    ctx = StreamContext(bridge=bridge, tokenizer=FakeTokenizer(table), ping_interval_s=15.0,
                        on_status=lambda route, status: None, on_finish=lambda done: None)
    ticket = Ticket(GenRequest(prompt=(1,)), None)
    out = GenerationStream(ctx=ctx, tickets=[ticket], spec=spec, header=header, prompt_tokens=2,
                           route=spec.kind, headers=(), arrival_s=0.0, renderer=render)
    return out, ticket, bridge


def named_events(raw: bytes) -> list:
    """SSE bytes -> openai-python event objects; each `event:` name equals its data's type."""
    events = []
    for block in raw.decode().split("\n\n")[:-1]:
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        parsed = EVENT.validate_python(json.loads(data_line[len("data: "):]))
        assert parsed.type == name_line[len("event: "):]
        events.append(parsed)
    return events
