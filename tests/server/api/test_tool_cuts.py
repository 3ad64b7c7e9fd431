"""An answer cut by the token limit inside its tool calls, in each of the four call formats,
through the chat and Responses renderers, whole and streamed: the complete calls come back
as calls, an unfinished one is dropped, and the call syntax never reaches the content
(`finish_reason` "length"; Responses `incomplete`, reason `max_output_tokens`). Also under
`tool_choice: auto` once the opening tag is written, and a forced answer cut inside its
opening tag."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from server.api import documents as docs
from server.api.chat.request import parse_chat
from server.api.chat.render import renderer as chat_renderer
from server.api.responses.parse import parse_responses
from server.api.responses.render import ResponseDocument, ResponseEvents
from server.api.tools import with_format
from server.text.client import Piece
from server.text.toolformats import GRANITE, HERMES, LLAMA3_JSON, MISTRAL
from tests.server.api.stream_helpers import named_events, split_for_tools

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "booking", "parameters": PARAMS}}
RESPONSES_TOOL = {"type": "function", "name": "booking", "parameters": PARAMS}
OSLO = {"city": "Oslo"}

# Per format: (one complete call then the start of a second one, cut; the first call cut
# before its arguments close; a cut inside the opening tag itself).
CUTS = {
    "hermes": (HERMES,
               '<tool_call>{"name": "booking", "arguments": {"city": "Oslo"}}</tool_call>\n'
               '<tool_call>{"name": "booking", "arguments": {"city": "Li',
               '<tool_call>{"name": "booking", "arguments": {"ci',
               "<tool_"),
    "mistral": (MISTRAL,
                '[TOOL_CALLS][{"name": "booking", "arguments": {"city": "Oslo"}}, '
                '{"name": "booking", "arguments": {"city": "Li',
                '[TOOL_CALLS][{"name": "booking", "argum',
                "[TOOL_"),
    "granite": (GRANITE,
                '<|tool_call|>[{"name": "booking", "arguments": {"city": "Oslo"}}, {"name": "boo',
                '<|tool_call|>[{"name": "booking", "arguments": {"city": "Os',
                "<|tool"),
    # one call at most (no parallel calls): the cut lands just after it
    "llama3_json": (LLAMA3_JSON,
                    '{"name": "booking", "parameters": {"city": "Oslo"}}',
                    '{"name": "booking", "parameters": {"city": "O',
                    '{"na'),
}
FORMATS = sorted(CUTS)


def chat_spec(fmt, stream: bool, choice):
    spec = parse_chat(json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                  "tools": [CHAT_TOOL], "tool_choice": choice,
                                  "stream": stream}).encode())
    return replace(spec, tools=with_format(spec.tools, fmt))


def responses_spec(fmt, stream: bool, choice):
    spec = parse_responses(json.dumps({"model": "m", "input": "x", "tools": [RESPONSES_TOOL],
                                       "tool_choice": choice, "max_output_tokens": 9,
                                       "stream": stream}).encode())
    return replace(spec, gen=replace(spec.gen, tools=with_format(spec.gen.tools, fmt)))


def pieces(text: str) -> list[Piece]:
    """The answer a few characters a token, the last piece finishing at the token limit."""
    parts = [text[i:i + 3] for i in range(0, len(text), 3)]
    return [Piece(p) for p in parts[:-1]] + [Piece(parts[-1], finish="length")]


def split(pieces_: list[Piece], spec) -> list[Piece]:
    """The pieces as the text layer hands them when tools are offered (content and calls)."""
    return split_for_tools(pieces_, spec.tools)


def chat_whole(fmt, text: str, choice) -> dict:
    spec = chat_spec(fmt, False, choice)
    render = chat_renderer(spec, docs.Header.new("chatcmpl", "m"))
    for piece in split(pieces(text), spec):
        render.piece(piece)
    return json.loads(render.finish(docs.usage(1, 9)))["choices"][0]


def chat_streamed(fmt, text: str, choice) -> tuple[str, list[dict], str]:
    """(the content deltas joined, the calls assembled from their deltas, the finish reason)."""
    spec = chat_spec(fmt, True, choice)
    render = chat_renderer(spec, docs.Header.new("chatcmpl", "m"))
    raw = b"".join(render.piece(p) for p in split(pieces(text), spec)) + render.finish(docs.usage(1, 9))
    chunks = [json.loads(line[6:]) for line in raw.decode().split("\n\n")
              if line.startswith("data: {")]
    content, calls, finishes = "", {}, []
    for chunk in chunks:
        choice_ = chunk["choices"][0]
        delta = choice_["delta"]
        content += delta.get("content") or ""
        for part in delta.get("tool_calls") or ():
            call = calls.setdefault(part["index"], {"name": "", "arguments": ""})
            call["name"] += part["function"].get("name", "")
            call["arguments"] += part["function"]["arguments"]
        if choice_["finish_reason"] is not None:
            finishes.append(choice_["finish_reason"])
    assert len(finishes) == 1
    return content, [calls[i] for i in sorted(calls)], finishes[0]


def responses_whole(fmt, text: str, choice) -> dict:
    spec = responses_spec(fmt, False, choice)
    render = ResponseDocument(docs.Header.new("resp", "m"), spec)
    for piece in split(pieces(text), spec.gen):
        render.piece(piece)
    return json.loads(render.finish(docs.usage(1, 9)))


def responses_streamed(fmt, text: str, choice) -> tuple[list, dict]:
    spec = responses_spec(fmt, True, choice)
    render = ResponseEvents(docs.Header.new("resp", "m"), spec)
    raw = b"".join(render.piece(p) for p in split(pieces(text), spec.gen)) + render.finish(docs.usage(1, 9))
    events = named_events(raw)
    return events, events[-1].response.model_dump()


FORCED = {"chat": {"type": "function", "function": {"name": "booking"}},
          "responses": {"type": "function", "name": "booking"}}


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("mode", ["forced", "required", "auto"])
def test_a_cut_after_a_complete_call_returns_that_call_and_no_markup(name, mode):
    fmt, text, _, _ = CUTS[name]
    chat_choice = FORCED["chat"] if mode == "forced" else mode
    whole = chat_whole(fmt, text, chat_choice)
    assert whole["finish_reason"] == "length" and whole["message"]["content"] is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in whole["message"]["tool_calls"]] == [("booking", OSLO)]
    content, calls, finish = chat_streamed(fmt, text, chat_choice)
    assert content == "" and finish == "length"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("booking", OSLO)]

    responses_choice = FORCED["responses"] if mode == "forced" else mode
    doc = responses_whole(fmt, text, responses_choice)
    assert doc["status"] == "incomplete"
    assert doc["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [(i["type"], i["name"], json.loads(i["arguments"])) for i in doc["output"]] == \
        [("function_call", "booking", OSLO)]
    events, final = responses_streamed(fmt, text, responses_choice)
    assert events[-1].type == "response.incomplete" and final["status"] == "incomplete"
    assert [i["type"] for i in final["output"]] == ["function_call"]
    assert not [e for e in events if e.type == "response.output_text.delta"]


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("mode", ["forced", "auto"])
def test_a_cut_inside_the_first_call_is_length_with_no_content_and_no_calls(name, mode):
    fmt, _, text, _ = CUTS[name]
    chat_choice = FORCED["chat"] if mode == "forced" else mode
    whole = chat_whole(fmt, text, chat_choice)
    assert whole["finish_reason"] == "length"
    assert whole["message"]["content"] is None and whole["message"].get("tool_calls") is None
    assert chat_streamed(fmt, text, chat_choice) == ("", [], "length")

    responses_choice = FORCED["responses"] if mode == "forced" else mode
    doc = responses_whole(fmt, text, responses_choice)
    assert doc["status"] == "incomplete" and doc["output"] == []
    events, final = responses_streamed(fmt, text, responses_choice)
    assert events[-1].type == "response.incomplete" and final["output"] == []
    assert not [e for e in events if e.type.startswith("response.output_text")]


@pytest.mark.parametrize("name", FORMATS)
def test_a_forced_answer_cut_inside_its_opening_tag_has_no_content(name):
    fmt, _, _, text = CUTS[name]
    whole = chat_whole(fmt, text, "required")
    assert whole["message"]["content"] is None and whole["finish_reason"] == "length"
    assert chat_streamed(fmt, text, "required") == ("", [], "length")
    assert responses_whole(fmt, text, "required")["output"] == []


def test_text_before_the_tag_stays_content_under_auto():
    text = "Sure. " + CUTS["hermes"][1]
    whole = chat_whole(HERMES, text, "auto")
    assert whole["message"]["content"] == "Sure." and len(whole["message"]["tool_calls"]) == 1
    content, calls, finish = chat_streamed(HERMES, text, "auto")
    assert content == "Sure. " and len(calls) == 1 and finish == "length"
    doc = responses_whole(HERMES, text, "auto")
    assert [i["type"] for i in doc["output"]] == ["message", "function_call"]
    assert doc["output"][0]["content"][0]["text"] == "Sure. "
    # an answer of text alone, cut by the limit, is text as before
    plain = chat_whole(HERMES, "no call at all <tool", "auto")
    assert plain["message"]["content"] == "no call at all <tool" and plain["finish_reason"] == "length"
