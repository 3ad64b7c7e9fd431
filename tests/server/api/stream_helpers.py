"""Helpers for the stream-shell tests of the API: a GenerationStream whose generation comes
from the real `EngineClient` on a feeding bridge (the tests deliver the engine's events by
hand), and a Responses SSE body read back as openai-python's own event objects."""
from __future__ import annotations

import json

import pydantic
from openai.types.responses import ResponseStreamEvent

from engine.api import GenRequest
from server.api import documents as docs
from server.api.launch import text_rules
from server.api.streams import GenerationStream, StreamContext
from server.text.client import AnswerCalls, CallRules, EngineClient
from tests.fakes import FakeServed, FakeTokenizer, FeedingBridge

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)


def generation_stream(spec, header: docs.Header, render, *, tokenizer=None, choices: int = 1,
                      echoes=None, prompt_tokens: int = 2, route: str | None = None,
                      statuses: list | None = None, finished: list | None = None,
                      ping_interval_s: float = 15.0, offloop=None):
    """A GenerationStream of `choices` tickets on a feeding bridge -> (stream, tickets,
    bridge). `statuses` / `finished` collect the counted statuses and finished requests."""
    bridge = FeedingBridge()
    kwargs = {} if offloop is None else {"offloop": offloop}
    ctx = StreamContext(ping_interval_s=ping_interval_s,
                        on_status=lambda route, status, model="": (
                            statuses.append(status) if statuses is not None else None),
                        on_finish=(finished.append if finished is not None
                                   else lambda done: None), **kwargs)
    client = EngineClient(FakeServed(tokenizer or FakeTokenizer()), bridge)
    generation = client.generate([GenRequest(prompt=(1,))] * choices, text_rules(spec),
                                 echoes=echoes)
    out = GenerationStream(ctx=ctx, generation=generation, spec=spec, header=header,
                           prompt_tokens=prompt_tokens, route=route or spec.kind, headers=(),
                           arrival_s=0.0, renderer=render)
    return out, [choice.ticket for choice in generation.choices], bridge


def recorded_stream(spec, header: docs.Header, render, table: dict[int, bytes]):
    """A GenerationStream of one ticket (token bytes from `table`) -> (stream, ticket, bridge)."""
    out, tickets, bridge = generation_stream(spec, header, render, tokenizer=FakeTokenizer(table))
    return out, tickets[0], bridge


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


def split_for_tools(pieces, tools) -> list:
    """Pieces as the text layer hands them to a renderer when tools are offered: each one
    split into content and calls by the real splitter (server/text/client.py)."""
    calls = AnswerCalls(CallRules(tools.fmt, tools.parallel, tools.forced))
    return [calls.split(piece)[0] for piece in pieces]
