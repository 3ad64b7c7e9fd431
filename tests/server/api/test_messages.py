"""The Anthropic Messages API without sockets: the request -> chat's typed conversation and
spec (Anthropic's names and ranges, the refusals), both renderers driven with pieces (every
document and event validated with the anthropic SDK's own pydantic types), and the error
shape the path chooses."""
from __future__ import annotations

import json

import pydantic
import pytest
from anthropic.types import Message as SdkMessage
from anthropic.types import RawMessageStreamEvent

from server.api import documents as docs
from server.api.messages.parse import parse_messages_request
from server.api.messages.render import MessageDocument, MessageEvents, signature
from server.errors import ApiError, ErrorShape, error_response, kind_response
from server.text.client import FinishReason, Piece
from server.text.messages import Message, TextPart, ToolCall
from server.text.reasoning import ENABLE_THINKING
from server.text.toolparse import CallOut, CallState

HEADER = docs.Header("msg-abc123", 0, "m")
USER = [{"role": "user", "content": "hi"}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"name": "weather", "description": "The weather.", "input_schema": WEATHER},
         {"name": "time", "input_schema": {"type": "object"}}]
EVENTS = pydantic.TypeAdapter(RawMessageStreamEvent)


def named_events(raw: bytes) -> list[tuple[str, dict]]:
    """SSE bytes -> (event name, data) pairs; each event is one `event:` and one `data:` line."""
    events = []
    for block in raw.decode().split("\n\n")[:-1]:
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        events.append((name_line[len("event: "):], json.loads(data_line[len("data: "):])))
    return events


def parse(counting: bool = False, **fields):
    body = {"model": "m", "messages": USER, **({} if counting else {"max_tokens": 8}), **fields}
    return parse_messages_request(json.dumps(body).encode(), counting=counting)


def refusal(**fields) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(**fields)
    return caught.value


# ---- the request -----------------------------------------------------------------------------

def test_system_blocks_tool_results_and_assistant_blocks_become_chat_messages():
    spec = parse(system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
                 messages=[
                     {"role": "user", "content": "weather?"},
                     {"role": "assistant", "content": [
                         {"type": "thinking", "thinking": "call it", "signature": "anything"},
                         {"type": "text", "text": "Let me look."},
                         {"type": "tool_use", "id": "toolu_1", "name": "weather",
                          "input": {"city": "Oslo"}}]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                         {"type": "tool_result", "tool_use_id": "toolu_2",
                          "content": [{"type": "text", "text": "12:00"}]},
                         {"type": "text", "text": "and now?"}]}])
    assert spec.messages == (
        Message("system", (TextPart("be brief"),)),
        Message("user", "weather?"),
        Message("assistant", (TextPart("Let me look."),),
                tool_calls=(ToolCall("weather", {"city": "Oslo"}, "toolu_1"),),
                reasoning_content="call it"),
        Message("tool", "sunny", tool_call_id="toolu_1"),
        Message("tool", (TextPart("12:00"),), tool_call_id="toolu_2"),
        Message("user", (TextPart("and now?"),)))


def test_a_user_turns_text_and_tool_results_keep_their_order():
    spec = parse(messages=[{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "tool_result", "tool_use_id": "t"},
        {"type": "text", "text": "b"}]}])
    assert spec.messages == (Message("user", (TextPart("a"),)),
                             Message("tool", "", tool_call_id="t"),
                             Message("user", (TextPart("b"),)))


def test_sampling_fields_take_anthropic_names_and_ranges_and_openai_only_fields_are_ignored():
    spec = parse(temperature=0.5, top_p=0.9, top_k=5, stop_sequences=["\n\n"], stream=True,
                 metadata={"user_id": "u"}, n=3, stop=["x"], seed=1)
    assert (spec.params.temperature, spec.params.top_p, spec.params.top_k) == (0.5, 0.9, 5)
    assert spec.stop == ("\n\n",) and spec.stream and spec.max_tokens == 8
    assert (spec.n, spec.seed) == (1, None)        # not Anthropic fields: unknown, ignored
    assert refusal(temperature=1.5).param == "temperature"      # OpenAI's 2.0 is not allowed
    assert refusal(stop_sequences=["a"] * 5).param == "stop_sequences"
    assert refusal(top_k=-2).param == "top_k"


def test_max_tokens_is_required_except_when_counting():
    with pytest.raises(ApiError) as caught:
        parse_messages_request(json.dumps({"model": "m", "messages": USER}).encode())
    assert caught.value.param == "max_tokens" and caught.value.status == 400
    assert parse(counting=True).max_tokens is None


def test_tools_and_each_tool_choice_map_onto_chats():
    spec = parse(tools=TOOLS)
    assert spec.tools.choice == "auto" and spec.tools.parallel
    assert spec.tools.tools[0] == {"type": "function", "function": {
        "name": "weather", "parameters": WEATHER, "description": "The weather."}}
    assert spec.tools.parameters_at == "tools[{i}].input_schema"
    assert parse(tools=TOOLS, tool_choice={"type": "any"}).tools.choice == "required"
    named = parse(tools=TOOLS, tool_choice={"type": "tool", "name": "time",
                                            "disable_parallel_tool_use": True}).tools
    assert (named.choice, named.named, named.parallel) == ("named", "time", False)
    assert not parse(tools=TOOLS, tool_choice={"type": "none"}).tools.offered
    assert refusal(tools=TOOLS, tool_choice={"type": "tool", "name": "nope"}).param == "tool_choice.name"
    assert refusal(tools=[{"name": "x"}]).param == "tools[0].input_schema"


def test_thinking_turns_the_templates_switch_and_checks_its_budget():
    assert dict(parse().template_vars) == {ENABLE_THINKING: False}     # Anthropic's default
    on = parse(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024})
    assert dict(on.template_vars) == {ENABLE_THINKING: True}
    assert dict(parse(thinking={"type": "adaptive"}).template_vars) == {ENABLE_THINKING: True}
    assert dict(parse(thinking={"type": "disabled"}).template_vars) == {ENABLE_THINKING: False}
    assert refusal(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1000}).param \
        == "thinking.budget_tokens"
    assert refusal(max_tokens=1024, thinking={"type": "enabled", "budget_tokens": 1024}).param \
        == "thinking.budget_tokens"
    assert refusal(thinking={"type": "sometimes"}).param == "thinking"


@pytest.mark.parametrize("fields, param", [
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0].type"),
    ({"system": [{"type": "document", "source": {}}]}, "system[0].type"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"input_schema": {"type": "object"}}]}, "tools[0].name"),
    ({"mcp_servers": [{"url": "x"}]}, "mcp_servers"),
    ({"messages": USER + [{"role": "assistant", "content": "The answer is"}]}, "messages[1]"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": []}, "messages"),
])
def test_what_is_not_served_is_a_400_naming_the_field(fields, param):
    err = refusal(**fields)
    assert (err.status_in(ErrorShape.ANTHROPIC), err.param) == (400, param)


# ---- the answer -------------------------------------------------------------------------------

def _spec(stream: bool, tools: bool = False):
    return parse(stream=stream, **({"tools": TOOLS} if tools else {}))


THINKING_PIECES = [Piece("", reasoning="Let me "), Piece("", reasoning="see."),
                   Piece("Hel"), Piece("lo", finish=FinishReason.STOP, stop_sequence="\n\n")]
CALL = CallOut(0, "weather", {"city": "Oslo " * 10})     # its JSON is more than one fragment
CALL_PIECES = [Piece("Ok. ", parts=("Ok. ",), calls=CallState(0, False)),
               Piece("<tool_call>...", parts=(CALL,), calls=CallState(1, True)),
               Piece("", finish=FinishReason.STOP, parts=(), calls=CallState(1, True))]
USAGE = docs.usage(11, 7)


def whole(pieces, tools: bool = False) -> dict:
    render = MessageDocument(HEADER, _spec(False, tools))
    assert all(render.piece(p) == b"" for p in pieces)
    document = json.loads(render.finish(USAGE))
    SdkMessage.model_validate(document)
    return document


def streamed(pieces, tools: bool = False) -> list[tuple[str, dict]]:
    render = MessageEvents(HEADER, _spec(True, tools), input_tokens=11)
    data = b"".join(render.piece(p) for p in pieces) + render.finish(USAGE)
    events = named_events(data)
    for name, payload in events:
        assert payload["type"] == name
        if name != "ping":                          # the SDK skips pings: not in its union
            EVENTS.validate_python(payload)
    return events


def concatenated(events) -> dict:
    """The message a client builds from the events (as the SDK's stream helper does)."""
    message, blocks = None, []
    for name, e in events:
        if name == "message_start":
            message = e["message"]
        elif name == "content_block_start":
            assert e["index"] == len(blocks)
            blocks.append(dict(e["content_block"], partial=""))
        elif name == "content_block_delta":
            block, delta = blocks[e["index"]], e["delta"]
            kind = delta["type"]
            if kind == "text_delta":
                block["text"] += delta["text"]
            elif kind == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif kind == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                block["partial"] += delta["partial_json"]
        elif name == "message_delta":
            message.update(e["delta"])
            message["usage"]["output_tokens"] = e["usage"]["output_tokens"]
    for block in blocks:
        partial = block.pop("partial")
        if block["type"] == "tool_use":
            block["input"] = json.loads(partial)
    return dict(message, content=blocks)


def test_a_thinking_answer_is_a_thinking_block_then_text_and_names_its_stop_sequence():
    document = whole(THINKING_PIECES)
    assert document["id"] == "msg_abc123" and document["model"] == "m"
    assert document["content"] == [
        {"type": "thinking", "thinking": "Let me see.", "signature": signature("Let me see.")},
        {"type": "text", "text": "Hello"}]
    assert (document["stop_reason"], document["stop_sequence"]) == ("stop_sequence", "\n\n")
    assert document["usage"] == {"input_tokens": 11, "output_tokens": 7,
                                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def test_stop_reasons_for_a_token_limit_and_a_plain_end():
    assert whole([Piece("a", finish=FinishReason.LENGTH)])["stop_reason"] == "max_tokens"
    plain = whole([Piece("a", finish=FinishReason.STOP)])
    assert (plain["stop_reason"], plain["stop_sequence"]) == ("end_turn", None)
    assert whole([Piece("", finish=FinishReason.STOP)])["content"] == []


def test_calls_are_tool_use_blocks_with_parsed_input_and_stop_reason_tool_use():
    document = whole(CALL_PIECES, tools=True)
    text, call = document["content"]
    assert text == {"type": "text", "text": "Ok. "}
    assert call["type"] == "tool_use" and call["id"].startswith("toolu_")
    assert (call["name"], call["input"]) == ("weather", {"city": "Oslo " * 10})
    assert document["stop_reason"] == "tool_use"


def test_the_event_stream_in_anthropics_order():
    names = [name for name, _ in streamed(THINKING_PIECES)]
    assert names == ["message_start", "ping",
                     "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_delta", "content_block_stop",        # + signature_delta
                     "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]
    start = streamed(THINKING_PIECES)[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 11


@pytest.mark.parametrize("pieces, tools", [(THINKING_PIECES, False), (CALL_PIECES, True)],
                         ids=["thinking and text", "text and a call"])
def test_the_streamed_events_add_up_to_the_whole_message(pieces, tools):
    built, document = concatenated(streamed(pieces, tools)), whole(pieces, tools)
    for message in (built, document):
        for block in message["content"]:
            block.pop("id", None)                  # each renderer draws its own call ids
    assert built == document
    fragments = [e["delta"]["partial_json"] for name, e in streamed(pieces, tools)
                 if name == "content_block_delta" and e["delta"]["type"] == "input_json_delta"]
    assert len(fragments) == (2 if tools else 0)


def test_an_error_after_the_head_is_an_error_event_in_anthropics_shape():
    render = MessageEvents(HEADER, _spec(True), input_tokens=1)
    (name, payload), = named_events(render.error(ApiError("internal_error", "boom")))
    assert (name, payload) == ("error", {"type": "error", "error": {"type": "api_error",
                                                                     "message": "boom"}})


# ---- the error shape --------------------------------------------------------------------------

@pytest.mark.parametrize("kind, status, anthropic_type", [
    ("invalid_request", 400, "invalid_request_error"),
    ("unsupported_parameter", 400, "invalid_request_error"),     # Anthropic has no 422
    ("invalid_api_key", 401, "authentication_error"),
    ("model_not_found", 404, "not_found_error"),
    ("body_too_large", 413, "request_too_large"),
    ("rate_limit_exceeded", 429, "rate_limit_error"),
    ("internal_error", 500, "api_error"),
    ("no_capacity", 529, "overloaded_error"),                   # the queue deadline passed
    ("shutting_down", 529, "overloaded_error"),
])
def test_the_messages_paths_answer_each_kind_in_anthropics_shape(kind, status, anthropic_type):
    err = ApiError(kind, "why", headers=(("Retry-After", "2"),))
    answer = error_response(err, path="/v1/messages")
    assert answer.status == status
    assert json.loads(answer.body) == {"type": "error", "error": {"type": anthropic_type,
                                                                  "message": "why"}}
    assert ("Retry-After", "2") in answer.headers
    assert error_response(err, path="/v1/messages/count_tokens").status == status
    openai = error_response(err, path="/v1/chat/completions")   # unchanged elsewhere
    assert openai.status == err.status and json.loads(openai.body) == err.document()


def test_a_transport_error_takes_the_shape_of_the_path_it_names():
    assert json.loads(kind_response("body_too_large", "big", "/v1/messages").body)["type"] == "error"
    assert "type" not in json.loads(kind_response("body_too_large", "big", "").body)
    assert ErrorShape.for_path("/v1/messagesx") is ErrorShape.OPENAI
