"""The Responses API without sockets: request parsing (input items, instructions, text.format,
the stateless refusals) and both renderers driven through the GenerationStream shell. Every
document and event is validated with openai-python's own pydantic types."""
from __future__ import annotations

import json

import pytest
from openai.types.responses import Response

from engine.api import FINISH_LENGTH, FINISH_STOP, GrammarSpec
from server.api import documents as docs
from server.worker.events import Failed
from server.api.defaults import SamplingDefaults
from server.errors import ApiError
from server.api.responses import parse_responses, renderer
from server.text.messages import Message, TextPart
from tests.fakes import tok
from tests.server.api.stream_helpers import recorded_stream
from tests.server.api.stream_helpers import named_events

TABLE = {1: b"he", 2: b"llo", 9: b"</s>"}           # 9 is the EOS: its text is never sent
OPENING = ["response.created", "response.in_progress", "response.output_item.added",
           "response.content_part.added"]
CLOSING = ["response.output_text.done", "response.content_part.done",
           "response.output_item.done"]


def parse(**fields):
    return parse_responses(json.dumps({"model": "m", **fields}).encode())


def refusal(**fields) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(**fields)
    return caught.value


# ---- parsing ---------------------------------------------------------------------------------

def test_a_string_input_is_one_user_message_and_instructions_the_system_message():
    spec = parse(input="hi", instructions="be brief", max_output_tokens=7, temperature=0.5,
                 top_p=0.9)
    assert spec.gen.messages == (Message("system", "be brief"), Message("user", "hi"))
    assert spec.gen.max_tokens == 7 and spec.max_output_tokens == 7
    assert (spec.gen.params.temperature, spec.gen.params.top_p) == (0.5, 0.9)
    assert spec.gen.structured is None and not spec.gen.stream


def test_message_items_take_input_text_parts_plain_strings_and_earlier_output_text():
    spec = parse(input=[
        {"type": "message", "role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "input_text", "text": "a"},
                                     {"type": "input_text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "c"}]}], stream=True)
    assert spec.gen.messages == (
        Message("developer", "rules"),
        Message("user", (TextPart("a"), TextPart("b"))),
        Message("assistant", (TextPart("c"),)))
    assert spec.gen.stream and spec.instructions is None


def test_server_defaults_fill_what_the_request_leaves_out():
    spec = parse_responses(b'{"model": "m", "input": "x"}',
                           SamplingDefaults(temperature=0.3, max_tokens=11))
    assert spec.gen.params.temperature == 0.3 and spec.gen.max_tokens == 11
    assert spec.max_output_tokens is None               # the echo says what the client sent


def test_text_format_json_schema_and_json_object_become_grammars_text_is_a_no_op():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    spec = parse(input="x", text={"format": {"type": "json_schema", "name": "A",
                                             "schema": schema, "strict": True}})
    assert spec.gen.structured.param == "text.format.schema"
    assert spec.gen.structured.spec.kind == "json_schema"
    assert parse(input="x", text={"format": {"type": "json_object"}}).gen.structured.spec == \
        GrammarSpec("json_object")
    plain = parse(input="x", text={"format": {"type": "text"}})
    assert plain.gen.structured is None and plain.text_format == {"type": "text"}


@pytest.mark.parametrize("fields, param", [
    ({"store": True}, "store"),
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"background": True}, "background"),
    ({"tools": [{"type": "web_search_preview"}]}, "tools[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
     "input[0].content[0].type"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
])
def test_stateful_builtin_tool_and_media_fields_are_422_naming_the_field(fields, param):
    err = refusal(**{"input": "x", **fields})
    assert (err.status, err.param) == (422, param)


def test_the_stateless_refusals_say_why():
    assert "stateless" in refusal(input="x", store=True).message
    assert "stores no responses" in refusal(input="x", previous_response_id="r").message


def test_store_false_and_tool_choice_none_are_accepted():
    assert parse(input="x", store=False, tool_choice="none").tool_choice == "none"


@pytest.mark.parametrize("fields, param", [
    ({}, "input"), ({"input": []}, "input"), ({"input": 3}, "input"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "bogus"}]}]}, "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
     "input[0].content[0].text"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "temperature": 3}, "temperature"),
    ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}},
     "text.format.name"),
    ({"input": "x", "instructions": 5}, "instructions"),
])
def test_bad_fields_are_400_naming_the_field(fields, param):
    err = refusal(**fields)
    assert (err.status, err.param) == (400, param)


# ---- the renderers through the shell ---------------------------------------------------------

def shell(stream: bool, **fields):
    spec = parse(input="x", stream=stream, **fields)
    header = docs.Header("resp", 1700000000, "m")
    return recorded_stream(spec.gen, header, renderer(spec, header), TABLE)


def test_whole_answer_is_a_completed_response_object():
    stream_, ticket, bridge = shell(False, instructions="be brief", metadata={"k": "v"})
    bridge.feed(ticket, tok(1), tok(2), tok(9, finish=FINISH_STOP))
    out = stream_.poll(0.0)
    assert out.done and out.head.status == 200
    doc = json.loads(out.chunks[0])
    response = Response.model_validate(doc)
    assert response.output_text == "hello" and response.status == "completed"
    assert response.id.startswith("resp_") and response.output[0].id.startswith("msg_")
    assert response.incomplete_details is None and response.created_at == 1700000000
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.total_tokens) == (2, 3, 5)
    assert response.instructions == "be brief" and response.metadata == {"k": "v"}
    assert doc["store"] is False and doc["tools"] == []


def test_a_length_cut_whole_answer_is_incomplete_with_the_reason():
    stream_, ticket, bridge = shell(False, max_output_tokens=2)
    bridge.feed(ticket, tok(1), tok(2, finish=FINISH_LENGTH))
    response = Response.model_validate(json.loads(stream_.poll(0.0).chunks[0]))
    assert response.status == "incomplete" and response.output[0].status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "hello" and response.max_output_tokens == 2


def test_streamed_answer_is_the_typed_event_sequence_numbered_from_zero():
    stream_, ticket, bridge = shell(True)
    bridge.feed(ticket, tok(1))
    first = stream_.poll(0.0)
    assert first.head.status == 200
    bridge.feed(ticket, tok(2), tok(9, finish=FINISH_STOP))
    last = stream_.poll(0.1)
    assert last.done
    events = named_events(b"".join(first.chunks + last.chunks))
    assert [e.type for e in events] == (OPENING + ["response.output_text.delta"] * 2
                                        + CLOSING + ["response.completed"])
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "hello"
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    done = events[-1].response
    assert done.output_text == "hello" and done.usage.output_tokens == 3
    assert done.id == events[0].response.id
    assert events[-4].text == "hello" and events[-2].item.status == "completed"


def test_a_length_cut_stream_ends_with_response_incomplete():
    stream_, ticket, bridge = shell(True, max_output_tokens=2)
    bridge.feed(ticket, tok(1), tok(2, finish=FINISH_LENGTH))
    events = named_events(b"".join(stream_.poll(0.0).chunks))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert events[-2].item.status == "incomplete"


def test_an_error_after_the_head_is_response_failed_and_the_stream_ends():
    stream_, ticket, bridge = shell(True)
    bridge.feed(ticket, tok(1))
    assert stream_.poll(0.0).head.status == 200
    bridge.feed(ticket, Failed("engine step failed"))
    out = stream_.poll(0.1)
    assert out.done and out.head is None
    events = named_events(b"".join(out.chunks))
    assert [e.type for e in events] == ["response.failed"]
    failed = events[0].response
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert failed.output[0].content[0].text == "he"        # what was sent before the fault


def test_an_error_before_the_head_is_an_openai_error_response():
    stream_, ticket, bridge = shell(True)
    bridge.feed(ticket, Failed("engine step failed"))
    out = stream_.poll(0.0)
    assert out.done and out.head.status == 500
    assert json.loads(b"".join(out.chunks))["error"]["type"] == "server_error"


def test_content_parts_are_checked_by_the_chat_rule_with_the_responses_part_types():
    def content_refusal(parts):
        return refusal(input=[{"role": "user", "content": parts}])
    err = content_refusal([{"type": "text", "text": "chat's type"}])
    assert (err.status, err.param) == (400, "input[0].content[0].type")
    assert "'input_text' or 'output_text'" in err.message
    err = content_refusal(["not an object"])
    assert (err.status, err.param) == (400, "input[0].content[0]")
    err = content_refusal([{"type": "input_text", "text": 3}])
    assert (err.status, err.param) == (400, "input[0].content[0].text")
    ok = parse(input=[{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                                     {"type": "output_text", "text": "b"}]}])
    assert ok.gen.messages[0].content == (TextPart("a"), TextPart("b"))
