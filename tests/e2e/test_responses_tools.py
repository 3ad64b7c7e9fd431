"""Function tools in the Responses API through the real server on smol-135m (its template
ignores `tools`: the default tool prompt and the Hermes format), with openai-python's
`responses.create` and `responses.stream` (it parses every event into its types) and
LangChain's `ChatOpenAI(use_responses_api=True).bind_tools`; a round trip through
function_call / function_call_output items; a repeated call ending a forced answer, in
chat completions and in the Responses API. Every test forces the choice: a 135M model's
own judgement never decides one."""
from __future__ import annotations

import json

import jsonschema
import pytest

from engine.api import EngineConfig
from tests.e2e.helpers import (REAL_CLIENT_TIMEOUT_S, REAL_KV_CACHE_MIB, client_fixture,
                               server_fixture)

# the same server as tests/e2e/test_tools_api.py: smol-135m with a small KV pool, its client
server = server_fixture("real_model_dir", engine=EngineConfig(kv_cache_mib=REAL_KV_CACHE_MIB))
client = client_fixture(timeout_s=REAL_CLIENT_TIMEOUT_S)

pytestmark = pytest.mark.real_model

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]}}, "required": ["city"]}
TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city.",
        "parameters": WEATHER}
ASK = "What is the weather in Paris?"
NAMED = {"type": "function", "name": "get_weather"}
MAX_TOKENS = 150                # far more than one call: a repeat must end the answer first


def _valid(item) -> dict:
    assert item.type == "function_call" and item.name == "get_weather"
    assert item.id.startswith("fc_") and item.call_id.startswith("call_")
    arguments = json.loads(item.arguments)
    jsonschema.validate(arguments, WEATHER)
    return arguments


def test_required_call_is_a_function_call_item_and_its_repeat_ends_the_answer(client, real_model_dir):
    done = client.responses.create(model=real_model_dir.name, input=ASK, tools=[TOOL],
                                   tool_choice="required", max_output_tokens=MAX_TOKENS,
                                   temperature=0)
    assert done.status == "completed" and done.output
    calls = [_valid(item) for item in done.output]
    assert len({json.dumps(c, sort_keys=True) for c in calls}) == len(calls)   # no repeat kept
    assert done.usage.output_tokens < MAX_TOKENS
    assert done.tools[0].name == "get_weather" and done.tool_choice == "required"


def test_chat_completions_required_parallel_call_ends_at_the_repeat(client, real_model_dir):
    done = client.chat.completions.create(
        model=real_model_dir.name, messages=[{"role": "user", "content": ASK}],
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}],
        tool_choice="required", max_tokens=MAX_TOKENS, temperature=0)
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls" and done.usage.completion_tokens < MAX_TOKENS
    arguments = [c.function.arguments for c in choice.message.tool_calls]
    assert arguments and len(set(arguments)) == len(arguments)


def test_stream_events_parse_and_the_final_response_holds_the_call(client, real_model_dir):
    with client.responses.stream(model=real_model_dir.name, input=ASK, tools=[TOOL],
                                 tool_choice=NAMED, max_output_tokens=80,
                                 temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-2:] == ["response.output_item.done", "response.completed"]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [item.type for item in final.output] == ["function_call"]
    assert _valid(final.output[0]) == json.loads(done.arguments)


def test_round_trip_function_call_and_its_output_as_input_items(client, real_model_dir):
    first = client.responses.create(model=real_model_dir.name, input=ASK, tools=[TOOL],
                                    tool_choice=NAMED, max_output_tokens=80, temperature=0)
    call = first.output[0]
    _valid(call)
    history = ([{"role": "user", "content": ASK}]
               + [item.model_dump(exclude_none=True) for item in first.output]
               + [{"type": "function_call_output", "call_id": call.call_id,
                   "output": '{"temperature": 18}'}])
    final = client.responses.create(model=real_model_dir.name, input=history, tools=[TOOL],
                                    tool_choice="none", max_output_tokens=12, temperature=0)
    assert [item.type for item in final.output] == ["message"]
    assert final.output_text and final.status in ("completed", "incomplete")


def test_langchain_responses_api_bind_tools_and_the_tool_result(server, real_model_dir):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=real_model_dir.name, base_url=server.http_url + "/v1",
                     api_key="unused", temperature=0, max_tokens=80, max_retries=0,
                     use_responses_api=True)
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
    ai = llm.bind_tools([tool], tool_choice="get_weather").invoke([HumanMessage(ASK)])
    assert [c["name"] for c in ai.tool_calls] == ["get_weather"]
    jsonschema.validate(ai.tool_calls[0]["args"], WEATHER)
    assert ai.tool_calls[0]["id"].startswith("call_")
    answer = llm.bind_tools([tool], tool_choice="none").invoke(
        [HumanMessage(ASK), ai,
         ToolMessage('{"temperature": 3}', tool_call_id=ai.tool_calls[0]["id"])])
    assert not answer.tool_calls and answer.text


def test_function_call_arguments_keep_the_schemas_key_order(client, real_model_dir):
    ordered = {"type": "object", "properties": {
        "zeta": {"type": "string", "enum": ["last", "first"]},
        "alpha": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["zeta", "alpha"]}
    tool = {"type": "function", "name": "rank", "description": "Rank it.", "parameters": ordered}
    done = client.responses.create(model=real_model_dir.name, input=ASK, tools=[tool],
                                   tool_choice={"type": "function", "name": "rank"},
                                   max_output_tokens=60, temperature=0)
    call = next(item for item in done.output if item.type == "function_call")
    assert list(json.loads(call.arguments)) == ["zeta", "alpha"], call.arguments


def test_a_forced_call_cut_by_max_output_tokens_is_incomplete_with_no_markup(client, real_model_dir):
    done = client.responses.create(model=real_model_dir.name, input=ASK, tools=[TOOL],
                                   tool_choice=NAMED, max_output_tokens=9, temperature=0)
    assert done.status == "incomplete" and done.incomplete_details.reason == "max_output_tokens"
    assert done.output == [] and done.output_text == "" and done.usage.output_tokens == 9
    with client.responses.stream(model=real_model_dir.name, input=ASK, tools=[TOOL],
                                 tool_choice=NAMED, max_output_tokens=9, temperature=0) as stream:
        events = list(stream)     # (get_final_response wants response.completed)
    kinds = [event.type for event in events]
    assert kinds[-1] == "response.incomplete" and events[-1].response.output == []
    assert "response.output_text.delta" not in kinds
