"""Tool calling at the edge: validation (server/api/tools.py via parse_chat), rendering (the
oracle's tool families byte-exact from client-shaped messages; the default tool prompt),
parsing each family's call text (server/text/toolparse.py) and the streamed deltas."""
from __future__ import annotations

import json
import shutil
from datetime import datetime

import pytest

from engine.api import GrammarCache, TokenOut, load_model
from server.api import documents as docs
from server.text.served import ServedModel
from server.errors import ApiError
from server.text.messages import Message, ToolCall, for_template
from server.api.chat.request import parse_chat
from server.api.completions import parse_completion
from server.text.client import Piece
from server.api.chat.render import ToolChatChunks, ToolChatDocument, chat_deltas
from server.api.chat.render import renderer as chat_renderer
from server.api.tools import call_grammar_spec, check_tools_compile, parse_tools
from server.text.toolformats import GRANITE, HERMES, LLAMA3_JSON, MISTRAL, tool_format
from server.text.toolparse import CallSplitter, kept_calls, split_calls
from template import Template
from tests.oracle import read_jsonl
from tests.server.api.stream_helpers import recorded_stream, split_for_tools

FN = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def chat(**fields) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


def refused(body: bytes, parse=parse_chat) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse(body)
    return info.value


# --- validation --------------------------------------------------------------------------------

def test_tool_choice_modes_parse():
    assert parse_chat(chat(tools=[FN])).tools.choice == "auto"
    assert parse_chat(chat(tools=[FN], tool_choice="none")).tools.offered is False
    spec = parse_chat(chat(tools=[FN], tool_choice={"type": "function", "function": {"name": "get_weather"}},
                           parallel_tool_calls=False)).tools
    assert (spec.choice, spec.named, spec.parallel) == ("named", "get_weather", False)
    assert call_grammar_spec(spec).tools[0][0] == "get_weather" and call_grammar_spec(spec).parallel is False
    assert call_grammar_spec(parse_chat(chat(tools=[FN])).tools).auto is True   # text, or a valid call
    assert call_grammar_spec(parse_chat(chat(tools=[FN], tool_choice="none")).tools) is None


@pytest.mark.parametrize("fields, param", [
    ({"tools": [FN], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [FN], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function"}]}, "tools[0]"),
    ({"tools": [FN, FN]}, "tools"),
    ({"tools": [FN], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": 5}]}, "messages[0].tool_call_id"),
])
def test_bad_tools_are_400_naming_the_field(fields, param):
    err = refused(chat(**fields))
    assert err.status == 400 and err.param == param


def test_unserved_combinations_and_legacy_fields_are_422():
    for body, param in [(chat(functions=[]), "functions"), (chat(function_call="auto"), "function_call"),
                        (chat(tools=[FN], tool_choice="required", response_format={"type": "json_object"}),
                         "tool_choice")]:
        err = refused(body)
        assert err.status == 422 and err.param == param
    err = refused(json.dumps({"model": "m", "prompt": "x", "tools": [FN]}).encode(), parse_completion)
    assert err.status == 422 and err.param == "tools"


def test_parameters_schemas_compile_at_validation():
    cache = GrammarCache()
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "minProperties": 1}}}
    with pytest.raises(ApiError) as unserved:
        check_tools_compile(cache, parse_tools({"tools": [FN, bad]}))
    assert unserved.value.status == 422 and unserved.value.param == "tools[1].function.parameters"
    invalid = {"type": "function", "function": {"name": "f", "parameters": {"type": "nothing"}}}
    with pytest.raises(ApiError) as wrong:
        check_tools_compile(cache, parse_tools({"tools": [invalid]}))
    assert wrong.value.status == 400 and wrong.value.param == "tools[0].function.parameters"


def test_assistant_tool_calls_history_is_accepted_with_arguments_parsed():
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"}]
    spec = parse_chat(json.dumps({"model": "m", "messages": messages}).encode())
    assert spec.messages[1].tool_calls == ()
    assert spec.messages[2].tool_calls == (ToolCall("f", {"a": 1}, "call_1"),)
    assert spec.messages[3] == Message("tool", "42", tool_call_id="call_1")


# --- rendering ---------------------------------------------------------------------------------

def _client_shaped(message: dict) -> dict:
    """What an OpenAI client sends: `function.arguments` as JSON text, not an object."""
    if not message.get("tool_calls"):
        return message
    calls = [dict(c, function=dict(c["function"], arguments=json.dumps(c["function"]["arguments"])))
             for c in message["tool_calls"]]
    return dict(message, tool_calls=calls)


def test_oracle_tool_families_render_byte_exact_from_client_messages():
    cases = [c for c in read_jsonl("template_cases.jsonl") if c["tools"] and c["error"] is None]
    assert len({c["template_name"] for c in cases}) == 7
    assert any(m.get("tool_calls") for c in cases for m in c["messages"])
    for case in cases:
        template = Template.parse(case["template_source"])
        body = {"model": "m", "messages": [_client_shaped(m) for m in case["messages"]], "tools": case["tools"]}
        spec = parse_chat(json.dumps(body).encode())
        assert "tools" in template.names
        rendered = template.render_chat(
            for_template(spec.messages, template.iterates_content_parts),
            add_generation_prompt=case["add_generation_prompt"], tools=list(spec.tools.tools),
            now=datetime.fromisoformat(case["frozen_now"]), **case["template_vars"])
        assert rendered == case["rendered"], (case["template_name"], case["case"])


def test_formats_are_chosen_from_the_template():
    first = {}
    for case in read_jsonl("template_cases.jsonl"):
        first.setdefault(case["template_name"], case["template_source"])
    chosen = {name: tool_format(src, "tools" in Template.parse(src).names).name for name, src in first.items()}
    assert chosen["Qwen-Qwen2.5-7B-Instruct"] == chosen["NousResearch-Hermes-3-Llama-3.1-8B-tool_use"] == "hermes"
    assert chosen["mistralai-Mistral-Nemo-Instruct-2407"] == "mistral"
    assert chosen["ibm-granite-granite-3.3-2B-Instruct"] == "granite"
    assert chosen["meta-llama-Llama-3.1-8B-Instruct"] == "llama3_json"
    assert chosen["SmolLM2-135M-Instruct"] == "hermes"      # ignores tools: the default format


def test_template_without_tools_gets_the_default_prompt(tiny_llama_dir, tmp_path):
    directory = shutil.copytree(tiny_llama_dir, tmp_path / "copy")
    smol = next(c for c in read_jsonl("template_cases.jsonl") if c["template_name"].startswith("SmolLM2"))
    (directory / "chat_template.jinja").write_text(smol["template_source"])
    served = ServedModel(load_model(directory), "tiny", 2048)
    assert served.reads_tools is False and served.tool_format == HERMES
    history = (Message("user", "Weather?"),
               Message("assistant", "", tool_calls=(ToolCall("get_weather", {"city": "Oslo"}, "c1"),)),
               Message("tool", "3 C", tool_call_id="c1"))
    prompt = served.render(history, tools=(FN,))
    assert prompt.startswith("<|im_start|>system\nYou can call functions.")
    assert json.dumps(FN["function"]) in prompt
    assert '<tool_call>{"name": <function-name>, "arguments": <arguments-json-object>}</tool_call>' in prompt
    assert '<|im_start|>assistant\n<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>' in prompt
    assert "<|im_start|>tool\n3 C<|im_end|>" in prompt
    assert "You can call functions" not in served.render(history[:1])      # no tools: no prompt


# --- parsing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, text", [
    (HERMES, 'Let me check. <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n'
             '<tool_call>{"name": "g", "arguments": {}}</tool_call>'),
    (MISTRAL, 'Let me check. [TOOL_CALLS][{"name": "f", "arguments": {"a": 1}, "id": "abcdefghi"}, '
              '{"name": "g", "arguments": {}}]'),
    (GRANITE, 'Let me check. <|tool_call|>[{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]'),
])
def test_each_family_parses(fmt, text):
    assert split_calls(text, fmt) == ("Let me check.", [("f", {"a": 1}), ("g", {})])
    assert split_calls(text, fmt, parallel=False)[1] == [("f", {"a": 1})]
    assert split_calls("no call here", fmt) == ("no call here", [])


def test_llama_json_is_a_call_only_at_the_start():
    assert split_calls(' {"name": "f", "parameters": {"a": 1}}', LLAMA3_JSON) == (None, [("f", {"a": 1})])
    assert split_calls('Use {"name": "f", "parameters": {}}', LLAMA3_JSON)[1] == []
    assert split_calls('<tool_call>{"name": "f", "arguments": {"a"', HERMES)[1] == []    # cut short


def test_whole_document_has_tool_calls():
    spec = parse_chat(chat(tools=[FN]))
    render = ToolChatDocument(docs.Header.new("chatcmpl", "m"), spec)
    render.piece(Piece('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>', finish="stop"))
    choice = json.loads(render.finish(docs.usage(1, 1)))["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}


# --- streaming ---------------------------------------------------------------------------------

def test_splitter_holds_back_a_possible_marker_and_sends_name_then_fragments():
    splitter = CallSplitter(HERMES, parallel=True)
    deltas = lambda outs: chat_deltas(outs, HERMES)
    assert deltas(splitter.push("Hi <tool")) == [{"content": "Hi "}]
    assert deltas(splitter.push("_ca")) == []
    out = deltas(splitter.push('ll>{"name": "f", "arguments": {"text": "' + "x" * 50 + '"}}</tool_call>'))
    first = out[0]["tool_calls"][0]
    assert first["index"] == 0 and first["id"].startswith("call_") and first["function"] == {"name": "f", "arguments": ""}
    fragments = [d["tool_calls"][0]["function"]["arguments"] for d in out[1:]]
    assert len(fragments) > 1 and json.loads("".join(fragments)) == {"text": "x" * 50}
    assert splitter.finish() == [] and splitter.sent == 1
    plain = CallSplitter(HERMES, parallel=True)
    assert deltas(plain.push("a <")) == [{"content": "a "}] and deltas(plain.finish()) == [{"content": "<"}]


def test_stream_chunks_end_with_tool_calls_finish():
    spec = parse_chat(chat(tools=[FN], stream=True))
    render = ToolChatChunks(docs.Header.new("chatcmpl", "m"), spec)
    piece, = split_for_tools([Piece('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>',
                                    finish="stop")], spec.tools)
    data = render.piece(piece)
    chunks = [json.loads(line[6:]) for line in data.decode().split("\n\n") if line.startswith("data: {")]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


# --- a repeated call ends the answer -------------------------------------------------------------

OSLO = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
LIMA = '<tool_call>{"name": "get_weather", "arguments": {"city": "Lima"}}</tool_call>\n'
CALL_TOKENS = {1: OSLO.encode(), 2: LIMA.encode()}


def tool_shell(stream: bool, **fields):
    """A chat stream offering FN under `tool_choice: required`, on a recording bridge."""
    spec = parse_chat(chat(tools=[FN], tool_choice="required", stream=stream, **fields))
    header = docs.Header.new("chatcmpl", "m")
    return recorded_stream(spec, header, chat_renderer(spec, header), CALL_TOKENS)


def call_token(token: int) -> TokenOut:
    return TokenOut(id=0, token=token, finish=None, logprob=0.0, top_logprobs=())


def test_a_streamed_call_repeating_an_earlier_one_ends_the_answer_and_aborts_the_request():
    stream_, ticket, bridge = tool_shell(True)
    bridge.feed(ticket, call_token(1), call_token(2), call_token(1), call_token(2))
    out = stream_.poll(0.0)
    assert out.done and bridge.aborted == [ticket]       # at the repeat, not at max_tokens
    events = [line[6:] for line in b"".join(out.chunks).decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    starts = [d["tool_calls"][0] for c in chunks for d in [c["choices"][0]["delta"]]
              if d.get("tool_calls") and "id" in d["tool_calls"][0]]
    assert [s["index"] for s in starts] == [0, 1]         # Oslo, Lima; the repeat dropped
    arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for c in chunks
                        for d in [c["choices"][0]["delta"]] if d.get("tool_calls"))
    assert arguments == '{"city": "Oslo"}{"city": "Lima"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert stream_.poll(1.0).done and bridge.aborted == [ticket]


def test_a_whole_answer_repeating_a_call_ends_there_with_the_repeat_dropped():
    stream_, ticket, bridge = tool_shell(False)
    bridge.feed(ticket, call_token(1), call_token(2), call_token(2))
    out = stream_.poll(0.0)
    assert out.done and bridge.aborted == [ticket]
    choice = json.loads(out.chunks[0])["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [json.loads(c["function"]["arguments"]) for c in choice["message"]["tool_calls"]] == \
        [{"city": "Oslo"}, {"city": "Lima"}]


def test_without_parallel_calls_nothing_is_cut_and_only_the_first_call_is_kept():
    assert kept_calls([("f", {}), ("f", {})], parallel=False) == [("f", {})]
    assert kept_calls([("f", {"a": 1}), ("f", {"a": 2})], parallel=True) == \
        [("f", {"a": 1}), ("f", {"a": 2})]                # same name, other arguments: kept
    splitter = CallSplitter(HERMES, parallel=False)
    splitter.push(OSLO + OSLO)
    assert not splitter.cut and splitter.sent == 1
