"""Function tools in the Responses API without sockets: the flat tools and tool_choice mapped
onto chat's ToolsSpec, built-in tools refused, the call items of the history as chat
messages, and the answer's calls as `function_call` items and events (through the
GenerationStream shell, validated with openai-python's own types), a repeated call ending
the answer."""
from __future__ import annotations

import json

import pytest
from openai.types.responses import Response

from engine.api import FINISH_LENGTH, FINISH_STOP, GrammarCache
from server.api import documents as docs
from server.errors import ApiError
from server.api.responses import parse_responses, renderer
from server.api.tools import check_tools_compile
from server.text.messages import Message, TextPart, ToolCall
from tests.fakes import tok
from tests.server.api.stream_helpers import named_events, recorded_stream

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city.",
        "parameters": WEATHER, "strict": True}
OSLO = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
LIMA = '<tool_call>{"name": "get_weather", "arguments": {"city": "Lima"}}</tool_call>\n'
TABLE = {1: b"Let me look. ", 2: OSLO.encode(), 3: LIMA.encode(), 9: b"</s>"}


def parse(**fields):
    return parse_responses(json.dumps({"model": "m", "input": "x", **fields}).encode())


def refusal(**fields) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(**fields)
    return caught.value


# ---- the request -----------------------------------------------------------------------------

def test_flat_function_tools_become_chats_tools_spec():
    spec = parse(tools=[TOOL], tool_choice="required", parallel_tool_calls=False)
    tools = spec.gen.tools
    assert tools.tools == ({"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city.", "parameters": WEATHER,
        "strict": True}},)
    assert (tools.choice, tools.parallel) == ("required", False)
    assert not spec.parallel_tool_calls and spec.tool_choice == "required"
    named = parse(tools=[TOOL], tool_choice={"type": "function", "name": "get_weather"})
    assert (named.gen.tools.choice, named.gen.tools.named) == ("named", "get_weather")
    assert named.tool_choice == {"type": "function", "name": "get_weather"}
    assert parse(tools=[TOOL]).gen.tools.choice == "auto"
    assert not parse(tools=[TOOL], tool_choice="none").gen.tools.offered
    assert parse().gen.tools is None


@pytest.mark.parametrize("kind", ["web_search", "web_search_preview", "file_search",
                                  "code_interpreter", "computer_use_preview",
                                  "image_generation", "mcp", "local_shell"])
def test_builtin_tools_are_422_naming_their_type(kind):
    err = refusal(tools=[TOOL, {"type": kind}])
    assert (err.status, err.param) == (422, "tools[1].type") and repr(kind) in err.message


@pytest.mark.parametrize("fields, status, param", [
    ({"tools": [{"type": "function"}]}, 400, "tools[0].name"),
    ({"tools": [dict(TOOL, parameters=[])]}, 400, "tools[0].parameters"),
    ({"tools": [dict(TOOL, strict="yes")]}, 400, "tools[0].strict"),
    ({"tools": [{"name": "f"}]}, 400, "tools[0].type"),
    ({"tools": {"type": "function"}}, 400, "tools"),
    ({"tools": [TOOL, TOOL]}, 400, "tools"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "other"}}, 400, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": {"type": "file_search"}}, 422, "tool_choice"),
    ({"tools": [TOOL], "tool_choice": "sometimes"}, 400, "tool_choice"),
    ({"tool_choice": "required"}, 400, "tool_choice"),
    ({"tools": [TOOL], "parallel_tool_calls": "yes"}, 400, "parallel_tool_calls"),
    ({"tools": [TOOL], "tool_choice": "required", "text": {"format": {"type": "json_object"}}},
     422, "tool_choice"),
])
def test_bad_tools_are_refused_naming_the_flat_field(fields, status, param):
    err = refusal(**fields)
    assert (err.status, err.param) == (status, param)


def test_an_invalid_parameters_schema_is_named_by_its_flat_path():
    spec = parse(tools=[TOOL, dict(TOOL, name="f", parameters={"type": "nothing"})])
    with pytest.raises(ApiError) as caught:
        check_tools_compile(GrammarCache(), spec.gen.tools)
    assert (caught.value.status, caught.value.param) == (400, "tools[1].parameters")


def test_call_items_become_an_assistant_turn_and_tool_messages():
    spec = parse(tools=[TOOL], input=[
        {"role": "user", "content": "weather?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}', "id": "fc_1", "status": "completed"},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "function_call", "call_id": "call_3", "name": "get_weather", "arguments": "{}"}])
    messages = spec.gen.messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert messages[1].content == (TextPart("ok"),)
    assert messages[1].tool_calls == (ToolCall("get_weather", {"city": "Oslo"}, "call_1"),
                                      ToolCall("get_weather", {}, "call_2"))
    assert messages[2] == Message("tool", "sunny", tool_call_id="call_1")
    assert messages[3].content == (TextPart("rain"),)
    assert messages[4].content == "" and messages[4].tool_calls[0].id == "call_3"


@pytest.mark.parametrize("item, param", [
    ({"type": "function_call", "name": "f", "arguments": "{}"}, "input[0].call_id"),
    ({"type": "function_call", "call_id": "c", "arguments": "{}"}, "input[0].name"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{no"},
     "input[0].arguments"),
    ({"type": "function_call_output", "call_id": "c"}, "input[0].output"),
    ({"type": "function_call_output", "output": "o"}, "input[0].call_id"),
])
def test_bad_call_items_are_400_naming_the_field(item, param):
    err = refusal(input=[item])
    assert (err.status, err.param) == (400, param)


# ---- the answer through the shell ------------------------------------------------------------

def shell(stream: bool, **fields):
    spec = parse(stream=stream, tools=[TOOL], **fields)
    header = docs.Header("resp", 1700000000, "m")
    return recorded_stream(spec.gen, header, renderer(spec, header), TABLE)


def test_whole_answer_has_the_message_then_function_call_items():
    stream_, ticket, bridge = shell(False)
    bridge.feed(ticket, tok(1), tok(2), tok(9, finish=FINISH_STOP))
    doc = json.loads(stream_.poll(0.0).chunks[0])
    response = Response.model_validate(doc)
    assert response.status == "completed" and response.output_text == "Let me look. "
    message, call = response.output
    assert message.type == "message" and message.status == "completed"
    assert call.type == "function_call" and call.status == "completed"
    assert call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Oslo"})
    assert doc["tools"] == [TOOL] and doc["tool_choice"] == "auto"


def test_an_answer_of_calls_only_has_no_message_item():
    stream_, ticket, bridge = shell(False, tool_choice="required")
    bridge.feed(ticket, tok(2), tok(3), tok(9, finish=FINISH_STOP))
    response = Response.model_validate(json.loads(stream_.poll(0.0).chunks[0]))
    assert [item.type for item in response.output] == ["function_call", "function_call"]
    assert [json.loads(item.arguments)["city"] for item in response.output] == ["Oslo", "Lima"]
    assert len({item.call_id for item in response.output}) == 2


def test_streamed_text_then_call_events_in_order_with_their_shapes():
    stream_, ticket, bridge = shell(True)
    bridge.feed(ticket, tok(1), tok(2), tok(9, finish=FINISH_STOP))
    events = named_events(b"".join(stream_.poll(0.0).chunks))
    assert [e.type for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added, delta, done, item_done = events[8:12]
    assert added.output_index == delta.output_index == done.output_index == 1
    assert added.item.type == "function_call" and added.item.arguments == ""
    assert added.item.status == "in_progress" and item_done.item.status == "completed"
    assert delta.item_id == done.item_id == added.item.id == item_done.item.id
    assert json.loads(done.arguments) == {"city": "Oslo"} and delta.delta == done.arguments
    final = events[-1].response
    assert [i.type for i in final.output] == ["message", "function_call"]
    assert final.output[1].call_id == added.item.call_id
    assert events[5].text == "Let me look. "


def test_a_streamed_answer_of_calls_only_numbers_its_items_from_zero():
    stream_, ticket, bridge = shell(True, tool_choice="required")
    bridge.feed(ticket, tok(2), tok(3), tok(9, finish=FINISH_STOP))
    events = named_events(b"".join(stream_.poll(0.0).chunks))
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [(e.output_index, e.item.type) for e in added] == [(0, "function_call"),
                                                              (1, "function_call")]
    assert not any(e.type.startswith("response.output_text") for e in events)
    assert events[-1].type == "response.completed"


def test_a_repeated_call_ends_the_answer_and_aborts_the_engine_request():
    stream_, ticket, bridge = shell(True, tool_choice="required")
    bridge.feed(ticket, tok(2), tok(3), tok(2), tok(3), tok(2))
    out = stream_.poll(0.0)
    assert out.done and bridge.aborted == [ticket]
    final = named_events(b"".join(out.chunks))[-1]
    assert final.type == "response.completed" and final.response.status == "completed"
    assert [json.loads(i.arguments)["city"] for i in final.response.output] == ["Oslo", "Lima"]
    whole, ticket, bridge = shell(False, tool_choice="required")
    bridge.feed(ticket, tok(2), tok(2), tok(3))
    out = whole.poll(0.0)
    assert out.done and bridge.aborted == [ticket]
    assert len(Response.model_validate(json.loads(out.chunks[0])).output) == 1


def test_a_length_cut_answer_with_a_call_is_incomplete_and_keeps_the_call():
    stream_, ticket, bridge = shell(True)
    bridge.feed(ticket, tok(2), tok(1, finish=FINISH_LENGTH))
    events = named_events(b"".join(stream_.poll(0.0).chunks))
    final = events[-1]
    assert final.type == "response.incomplete"
    assert [i.type for i in final.response.output] == ["function_call"]

