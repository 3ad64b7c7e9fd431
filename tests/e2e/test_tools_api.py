"""Tool calling through the real server on smol-135m (its template ignores `tools`: the
default tool prompt and the Hermes format): openai-python forced calls (named and
`required`), the streamed call assembled by its stream helper, a round trip, and LangChain's
`bind_tools` and `with_structured_output` (all three methods). Every test forces the choice:
a 135M model's own judgement never decides one."""
from __future__ import annotations

import json

import jsonschema
import pydantic
import pytest

from server.config import EngineConfig
from bench.client_lengths import repeated_keys
from tests.e2e.helpers import (REAL_CLIENT_TIMEOUT_S, REAL_KV_CACHE_MIB, client_fixture,
                               server_fixture)

pytestmark = pytest.mark.real_model

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 6}}, "required": ["zone"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Time in a zone.",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=8)
    population_millions: int = pydantic.Field(ge=0, le=40)


server = server_fixture("real_model_dir", engine=EngineConfig(kv_cache_mib=REAL_KV_CACHE_MIB))
client = client_fixture(timeout_s=REAL_CLIENT_TIMEOUT_S)


def _valid(call) -> dict:
    assert call.type == "function" and call.id.startswith("call_")
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return arguments


def test_named_and_required_choices_return_valid_calls(client, real_model_dir):
    named = client.chat.completions.create(
        model=real_model_dir.name, messages=ASK, tools=TOOLS, max_tokens=80, temperature=1.0, seed=3,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    choice = named.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert [c.function.name for c in choice.message.tool_calls] == ["get_time"]
    _valid(choice.message.tool_calls[0])
    required = client.chat.completions.create(
        model=real_model_dir.name, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=80,
        temperature=0, parallel_tool_calls=False)
    choice = required.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    _valid(choice.message.tool_calls[0])


def test_auto_answers_text_or_valid_calls(client, real_model_dir):
    for seed in (1, 2, 3):
        done = client.chat.completions.create(model=real_model_dir.name, messages=ASK, tools=TOOLS,
                                              max_tokens=60, temperature=1.0, seed=seed)
        choice = done.choices[0]
        if choice.message.tool_calls:          # the model chose a call: the grammar made it valid
            assert choice.finish_reason in ("tool_calls", "length")
            for call in choice.message.tool_calls:
                _valid(call)
        else:
            assert isinstance(choice.message.content, str)
            # a started call is held to the grammar: it parses unless max_tokens cut it
            assert choice.finish_reason == "length" or not choice.message.content.startswith("<tool_call>")


def test_streamed_call_is_assembled_by_the_stream_helper(client, real_model_dir):
    with client.chat.completions.stream(
            model=real_model_dir.name, messages=ASK, tools=TOOLS, max_tokens=80, temperature=0,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_completion()
    assert "tool_calls.function.arguments.done" in events
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert _valid(choice.message.tool_calls[0])["city"] in ("Paris", "Oslo", "Lima")


# Properties deliberately out of alphabetical order: the call writes them as declared.
ORDERED = {"type": "object", "properties": {
    "zeta": {"type": "string", "enum": ["last", "first"]},
    "alpha": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["zeta", "alpha"]}
ORDERED_TOOL = [{"type": "function", "function": {"name": "rank", "description": "Rank it.",
                                                  "parameters": ORDERED}}]


def test_call_arguments_keep_the_schemas_key_order_whole_and_streamed(client, real_model_dir):
    forced = {"type": "function", "function": {"name": "rank"}}
    done = client.chat.completions.create(model=real_model_dir.name, messages=ASK,
                                          tools=ORDERED_TOOL, tool_choice=forced,
                                          max_tokens=60, temperature=0)
    arguments = done.choices[0].message.tool_calls[0].function.arguments
    assert list(json.loads(arguments)) == ["zeta", "alpha"], arguments
    with client.chat.completions.stream(model=real_model_dir.name, messages=ASK,
                                        tools=ORDERED_TOOL, tool_choice=forced,
                                        max_tokens=60, temperature=0) as stream:
        deltas = "".join(e.arguments_delta for e in stream
                         if e.type == "tool_calls.function.arguments.delta")
    assert list(json.loads(deltas)) == ["zeta", "alpha"], deltas
    jsonschema.validate(json.loads(deltas), ORDERED)


def test_a_forced_call_cut_by_max_tokens_is_length_with_no_markup(client, real_model_dir):
    forced = {"type": "function", "function": {"name": "get_weather"}}
    for max_tokens in (3, 9):               # inside the tag; inside the arguments
        done = client.chat.completions.create(model=real_model_dir.name, messages=ASK,
                                              tools=TOOLS, tool_choice=forced,
                                              max_tokens=max_tokens, temperature=0)
        choice = done.choices[0]
        assert choice.finish_reason == "length" and done.usage.completion_tokens == max_tokens
        assert choice.message.content is None and choice.message.tool_calls is None
        chunks = list(client.chat.completions.create(
            model=real_model_dir.name, messages=ASK, tools=TOOLS, tool_choice=forced,
            max_tokens=max_tokens, temperature=0, stream=True))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert not any(d.content for d in deltas) and not any(d.tool_calls for d in deltas)
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_round_trip_call_result_answer(client, real_model_dir):
    first = client.chat.completions.create(
        model=real_model_dir.name, messages=ASK, tools=TOOLS, max_tokens=80, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18}'}]
    final = client.chat.completions.create(model=real_model_dir.name, messages=history, tools=TOOLS,
                                           tool_choice="none", max_tokens=12, temperature=0)
    choice = final.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length")
    assert isinstance(choice.message.content, str) and choice.message.content


def test_langchain_bind_tools_and_structured_output(server, real_model_dir):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=real_model_dir.name, base_url=server.http_url + "/v1", api_key="unused",
                     temperature=0, max_tokens=80, max_retries=0)
    bound = llm.bind_tools(TOOLS, tool_choice="get_weather")
    ai = bound.invoke([HumanMessage("Weather in Oslo?")])
    assert ai.tool_calls and ai.tool_calls[0]["name"] == "get_weather"
    jsonschema.validate(ai.tool_calls[0]["args"], WEATHER)
    answer = llm.bind_tools(TOOLS, tool_choice="none").invoke(
        [HumanMessage("Weather in Oslo?"), ai, ToolMessage('{"temperature": 3}', tool_call_id=ai.tool_calls[0]["id"])])
    assert isinstance(answer.content, str) and not answer.tool_calls
    for method in ("json_schema", "function_calling"):
        city = llm.with_structured_output(City, method=method).invoke("A big city, please.")
        assert isinstance(city, City), method
    # json_mode guarantees an object, not its end: an answer to copy lets the greedy 135M model close it
    as_json = llm.with_structured_output(None, method="json_mode").invoke(
        'Repeat this JSON object exactly: {"city": "Paris"}')
    assert isinstance(as_json, dict)


def test_json_object_mode_writes_each_key_once_at_temperature_0(client, real_model_dir):
    """smol-135m at temperature 0 wrote "role_description" twice in one object here while
    the grammar let any key repeat; now every object keeps its keys apart."""
    done = client.chat.completions.create(
        model=real_model_dir.name, temperature=0, max_tokens=120,
        messages=[{"role": "user", "content": "Give a JSON object with keys for each role."}],
        response_format={"type": "json_object"})
    text = done.choices[0].message.content
    assert text.startswith("{") and len(text) > 100
    assert repeated_keys(text) == [], text
    assert repeated_keys('{"a": 1, "b": {"a": 2}, "a": 3') == ["a"]      # the scanner sees one
