"""Tool calls and frameworks on the Anthropic Messages API, on smol-135m (its template ignores
`tools`: the default tool prompt and the Hermes format): the anthropic SDK's tool round trip
(`tool_choice` any -> a tool_use block -> a tool_result -> the answer) and a named tool
streamed through `messages.stream()`, then LangChain's `ChatAnthropic` (invoke and stream the
same answer at temperature 0; `bind_tools`). Every tool test forces the choice: a 135M
model's own judgement never decides one."""
from __future__ import annotations

import anthropic
import jsonschema
import pytest

from server.config import EngineConfig
from tests.e2e.helpers import REAL_CLIENT_TIMEOUT_S, REAL_KV_CACHE_MIB, server_fixture

pytestmark = pytest.mark.real_model

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]}}, "required": ["city"]}
TIME = {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 6}},
        "required": ["zone"]}
TOOLS = [{"name": "get_weather", "description": "Weather in a city.", "input_schema": WEATHER},
         {"name": "get_time", "description": "Time in a zone.", "input_schema": TIME}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}     # this SDK's create takes no sampling fields: extra_body

server = server_fixture("real_model_dir", engine=EngineConfig(kv_cache_mib=REAL_KV_CACHE_MIB))


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.http_url, api_key="unused", max_retries=0,
                               timeout=REAL_CLIENT_TIMEOUT_S)


def _valid(block) -> dict:
    assert block.type == "tool_use" and block.id.startswith("toolu_")
    jsonschema.validate(block.input, SCHEMAS[block.name])
    return block.input


def test_a_tool_round_trip_with_tool_choice_any(client, real_model_dir):
    first = client.messages.create(
        model=real_model_dir.name, max_tokens=60, messages=ASK, tools=TOOLS,
        tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body=GREEDY)
    assert first.stop_reason == "tool_use"
    (call,) = first.content
    _valid(call)
    history = dict(model=real_model_dir.name, tools=TOOLS, tool_choice={"type": "none"},
                   messages=ASK + [
                       {"role": "assistant", "content": [c.model_dump() for c in first.content]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                     "content": "Sunny, 21 C."}]}])
    answer = client.messages.create(max_tokens=8, extra_body=GREEDY, **history)
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert answer.usage.input_tokens == client.messages.count_tokens(**history).input_tokens
    without = client.messages.count_tokens(model=real_model_dir.name, messages=ASK)
    assert answer.usage.input_tokens > without.input_tokens + 10     # the call and its result


def test_a_named_tool_streamed_is_the_calls_input_json(client, real_model_dir):
    with client.messages.stream(model=real_model_dir.name, max_tokens=60, messages=ASK,
                                tools=TOOLS, tool_choice={"type": "tool", "name": "get_time"},
                                extra_body=GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    calls = [b for b in final.content if b.type == "tool_use"]
    assert [c.name for c in calls][:1] == ["get_time"]
    _valid(calls[0])
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and "input_json" in kinds
    assert kinds.index("content_block_start") < kinds.index("input_json") < \
        kinds.index("content_block_stop")


def test_langchain_chat_anthropic_invoke_stream_and_bind_tools(server, real_model_dir):
    from langchain_anthropic import ChatAnthropic
    llm = ChatAnthropic(model=real_model_dir.name, base_url=server.http_url, api_key="unused",
                        max_tokens=12, temperature=0, max_retries=0,
                        default_request_timeout=REAL_CLIENT_TIMEOUT_S)
    whole = llm.invoke("Say hi")
    assert whole.content and whole.response_metadata["stop_reason"] in ("end_turn", "max_tokens")
    assert whole.usage_metadata["output_tokens"] <= 12
    chunks = list(llm.stream("Say hi"))
    assert len(chunks) > 2
    assert "".join(c.content if isinstance(c.content, str) else
                   "".join(p.get("text", "") for p in c.content) for c in chunks) == whole.content
    tooled = ChatAnthropic(model=real_model_dir.name, base_url=server.http_url,
                           api_key="unused", max_tokens=60, temperature=0, max_retries=0,
                           default_request_timeout=REAL_CLIENT_TIMEOUT_S).bind_tools(
        TOOLS[:1], tool_choice="get_weather")
    called = tooled.invoke("What is the weather in Paris?")
    (call,) = called.tool_calls[:1]
    assert call["name"] == "get_weather" and call["id"].startswith("toolu_")
    jsonschema.validate(call["args"], WEATHER)
