"""Thinking kept apart at the API: `chat_template_kwargs` and `reasoning_effort` reach the
template, a thinking answer's reasoning goes out as `reasoning_content` (chat) or a
`reasoning` item (Responses), tool calls are parsed from the answer only, and the request's
grammar is moved behind the reasoning."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from engine.api import FINISH_LENGTH, FINISH_STOP, GrammarSpec, ThinkPrefix
from server.api import documents as docs
from server.api.chat.request import parse_chat
from server.api.chat.render import renderer as chat_renderer
from server.api.responses import parse_responses
from server.api.responses import renderer as responses_renderer
from server.api.structured import Structured
from server.api.thinking import after_thinking
from server.errors import ApiError
from server.text.reasoning import Thinking
from tests.fakes import tok
from tests.server.api.stream_helpers import named_events, recorded_stream

OSLO = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
ROME = '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
# A thinking answer in pieces: the tags split across tokens, a call drafted inside the thinking.
TABLE = {1: b"<thi", 2: b"nk>\nI could call ", 3: ROME.encode(), 4: b" but no.\n</th",
         5: b"ink>\n\nIt is sunny.", 6: OSLO.encode(), 9: b"</s>"}
THOUGHT = "I could call " + ROME + " but no."
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
HEADER = docs.Header("chatcmpl", 1700000000, "m")


def chat(**fields):
    return parse_chat(json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                  **fields}).encode())


def refused(parse, **fields) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(**fields)
    return caught.value


# ---- the request fields ----------------------------------------------------------------------

def test_chat_template_kwargs_and_reasoning_effort_become_template_variables():
    assert chat().template_vars == ()
    assert dict(chat(chat_template_kwargs={"enable_thinking": False, "x": [1, {"y": None}]})
                .template_vars) == {"enable_thinking": False, "x": [1, {"y": None}]}
    assert dict(chat(reasoning_effort="none").template_vars) == {
        "reasoning_effort": "none", "enable_thinking": False}
    for effort in ("minimal", "low", "medium", "high"):
        assert dict(chat(reasoning_effort=effort).template_vars) == {"reasoning_effort": effort}
    both = chat(reasoning_effort="none", chat_template_kwargs={"enable_thinking": True})
    assert dict(both.template_vars)["enable_thinking"] is True     # the explicit kwargs win


@pytest.mark.parametrize("fields, param", [
    ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
    ({"chat_template_kwargs": "enable_thinking=false"}, "chat_template_kwargs"),
    ({"reasoning_effort": "max"}, "reasoning_effort"),
    ({"reasoning_effort": 1}, "reasoning_effort"),
    ({"messages": [{"role": "assistant", "content": "a", "reasoning_content": 3}]},
     "messages[0].reasoning_content"),
])
def test_bad_thinking_fields_are_400_naming_the_field(fields, param):
    err = refused(chat, **fields)
    assert (err.status, err.param) == (400, param)


def test_history_reasoning_content_is_a_typed_field():
    spec = chat(messages=[{"role": "user", "content": "q"},
                          {"role": "assistant", "content": "a", "reasoning_content": "r"}])
    assistant = spec.messages[1]
    assert assistant.reasoning_content == "r" and assistant.extra == ()


def responses(**fields):
    return parse_responses(json.dumps({"model": "m", "input": "x", **fields}).encode())


def test_responses_reasoning_effort_and_reasoning_items_sent_back():
    assert dict(responses(reasoning={"effort": "none"}).gen.template_vars)["enable_thinking"] is False
    err = refused(responses, reasoning={"effort": "max"})
    assert (err.status, err.param) == (400, "reasoning.effort")
    spec = responses(input=[
        {"role": "user", "content": "q"},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "think"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a"}]}])
    user, assistant = spec.gen.messages
    assert (assistant.role, assistant.reasoning_content) == ("assistant", "think")
    assert assistant.content[0].text == "a"


# ---- the grammar behind the reasoning --------------------------------------------------------

def test_the_grammar_is_moved_behind_the_reasoning_only_when_the_answer_thinks():
    structured = Structured("response_format", GrammarSpec("json_object"))
    assert after_thinking(structured, None) is structured
    assert after_thinking(None, Thinking()) is None
    moved = after_thinking(structured, Thinking(starts_inside=True))
    assert moved.param == "response_format"
    assert moved.spec == replace(structured.spec, think=ThinkPrefix("<think>", "</think>", starts_inside=True))


# ---- chat answers ----------------------------------------------------------------------------

def chat_shell(spec, table=TABLE):
    return recorded_stream(spec, HEADER, chat_renderer(spec, HEADER), table)


def deltas(raw: bytes) -> list[dict]:
    return [json.loads(line[len(b"data: "):])["choices"][0]["delta"]
            for line in raw.split(b"\n\n") if line.startswith(b"data: {")
            and json.loads(line[len(b"data: "):])["choices"]]


def test_a_whole_chat_answer_carries_reasoning_content_and_a_clean_content():
    stream, ticket, bridge = chat_shell(replace(chat(), thinking=Thinking()))
    bridge.feed(ticket, tok(1), tok(2), tok(3), tok(4), tok(5), tok(9, finish=FINISH_STOP))
    doc = json.loads(stream.poll(0.0).chunks[0])
    message = ChatCompletion.model_validate(doc).choices[0].message
    assert message.content == "It is sunny."
    assert message.model_extra["reasoning_content"] == THOUGHT


def test_a_streamed_chat_sends_reasoning_deltas_then_content():
    stream, ticket, bridge = chat_shell(replace(chat(stream=True), thinking=Thinking()))
    bridge.feed(ticket, tok(1), tok(2), tok(3), tok(4), tok(5), tok(9, finish=FINISH_STOP))
    sent = deltas(b"".join(stream.poll(0.0).chunks))
    reasoning = [d["reasoning_content"] for d in sent if "reasoning_content" in d]
    content = [d["content"] for d in sent[1:] if "content" in d]
    assert "".join(reasoning) == THOUGHT and "".join(content) == "It is sunny."
    last_reasoning = max(i for i, d in enumerate(sent) if "reasoning_content" in d)
    first_content = min(i for i, d in enumerate(sent[1:], 1) if d.get("content"))
    assert last_reasoning < first_content                 # the reasoning comes first


def test_a_max_tokens_cut_inside_the_reasoning_keeps_it_as_reasoning():
    stream, ticket, bridge = chat_shell(replace(chat(), thinking=Thinking()))
    bridge.feed(ticket, tok(1), tok(2, finish=FINISH_LENGTH))
    message = json.loads(stream.poll(0.0).chunks[0])["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "", "reasoning_content": "I could call "}


def test_without_thinking_the_answer_is_the_text_as_generated():
    stream, ticket, bridge = chat_shell(chat())
    bridge.feed(ticket, tok(1), tok(2), tok(5), tok(9, finish=FINISH_STOP))
    message = json.loads(stream.poll(0.0).chunks[0])["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "<think>\nI could call ink>\n\nIt is sunny."}


def test_tool_calls_are_parsed_from_the_answer_not_the_reasoning():
    spec = replace(chat(tools=[TOOL]), thinking=Thinking())
    stream, ticket, bridge = chat_shell(spec)
    bridge.feed(ticket, tok(1), tok(2), tok(3), tok(4), tok(5), tok(6), tok(9, finish=FINISH_STOP))
    choice = json.loads(stream.poll(0.0).chunks[0])["choices"][0]
    calls = choice["message"]["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Oslo"}]
    assert choice["message"]["reasoning_content"] == THOUGHT
    assert choice["message"]["content"] == "It is sunny." and choice["finish_reason"] == "tool_calls"


def test_streamed_tool_calls_come_from_the_answer_after_the_reasoning():
    spec = replace(chat(tools=[TOOL], stream=True), thinking=Thinking())
    stream, ticket, bridge = chat_shell(spec)
    bridge.feed(ticket, tok(1), tok(2), tok(3), tok(4), tok(5), tok(6), tok(9, finish=FINISH_STOP))
    sent = deltas(b"".join(stream.poll(0.0).chunks))
    names = [d["tool_calls"][0]["function"].get("name") for d in sent if "tool_calls" in d]
    arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for d in sent if "tool_calls" in d)
    assert [n for n in names if n] == ["get_weather"] and json.loads(arguments) == {"city": "Oslo"}
    assert "".join(d.get("reasoning_content", "") for d in sent) == THOUGHT


# ---- Responses answers -----------------------------------------------------------------------

def responses_shell(spec):
    header = docs.Header("resp", 1700000000, "m")
    spec = replace(spec, gen=replace(spec.gen, thinking=Thinking()))
    return recorded_stream(spec.gen, header, responses_renderer(spec, header), TABLE)


def test_a_whole_response_has_the_reasoning_item_before_the_message():
    stream, ticket, bridge = responses_shell(responses())
    bridge.feed(ticket, tok(1), tok(2), tok(3), tok(4), tok(5), tok(9, finish=FINISH_STOP))
    doc = json.loads(stream.poll(0.0).chunks[0])
    response = Response.model_validate(doc)
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert reasoning.summary == [] and [c.text for c in reasoning.content] == [THOUGHT]
    assert doc["output"][0]["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    assert message.type == "message" and response.output_text == "It is sunny."


def test_a_streamed_response_sends_reasoning_text_events_then_the_message():
    stream, ticket, bridge = responses_shell(responses(stream=True))
    bridge.feed(ticket, tok(1), tok(2), tok(3), tok(4), tok(5), tok(9, finish=FINISH_STOP))
    events = named_events(b"".join(stream.poll(0.0).chunks))
    kinds = [e.type for e in events]
    assert kinds[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.reasoning_text.delta"]
    deltas_ = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    done = next(e for e in events if e.type == "response.reasoning_text.done")
    assert "".join(deltas_) == done.text == THOUGHT
    reasoning_done = kinds.index("response.reasoning_text.done")
    assert reasoning_done < kinds.index("response.output_text.delta")
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [(e.output_index, e.item.type) for e in added] == [(0, "reasoning"), (1, "message")]
    text = [e for e in events if e.type == "response.output_text.delta"]
    assert {e.output_index for e in text} == {1} and "".join(e.delta for e in text) == "It is sunny."
    completed = events[-1].response
    assert [item.type for item in completed.output] == ["reasoning", "message"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
