"""`POST /v1/responses` through a real server (succ model) with the clients people use:
openai-python's `responses.create`, `responses.stream`, `responses.parse`, and LangChain's
`ChatOpenAI(use_responses_api=True)`; raw SSE for the event names; an engine fault after the
head for `response.failed`."""
from __future__ import annotations

import json
import threading
from typing import Literal

import openai
import pydantic
import pytest
import requests
from openai.types.responses import ResponseFailedEvent

from tests.e2e.helpers import TIMEOUT_S, client_fixture, post, running_server, server_fixture
from tests.polling import wait_for

ENUM_FORMAT = {"format": {"type": "json_schema", "name": "word",
                          "schema": {"enum": ["bcd", "xyz"]}, "strict": True}}
OPENING = ["response.created", "response.in_progress", "response.output_item.added",
           "response.content_part.added"]
CLOSING = ["response.output_text.done", "response.content_part.done",
           "response.output_item.done"]


class Word(pydantic.BaseModel):
    word: Literal["bcd"]


server = server_fixture("succ_model_dir")
client = client_fixture(timeout_s=30)


def test_create_cut_by_max_output_tokens_is_incomplete(client):
    done = client.responses.create(model="succ", input="a", max_output_tokens=3,
                                   temperature=0)
    assert done.output_text == "bcd"
    assert done.status == "incomplete" and done.incomplete_details.reason == "max_output_tokens"
    assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.total_tokens) == \
        (1, 3, 4)
    assert done.id.startswith("resp_") and done.output[0].role == "assistant"


def test_create_with_message_items_and_instructions_completes_under_a_json_schema(client):
    done = client.responses.create(
        model="succ", instructions="answer with a word", temperature=0, text=ENUM_FORMAT,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "a"}]}])
    assert done.status == "completed" and done.incomplete_details is None
    assert json.loads(done.output_text) == "bcd"
    assert done.instructions == "answer with a word"


def test_parse_with_a_pydantic_text_format(client):
    done = client.responses.parse(model="succ", input="a", temperature=0, text_format=Word)
    assert done.status == "completed" and done.output_parsed == Word(word="bcd")


def test_stream_helper_yields_the_events_in_order_and_the_final_response(client):
    with client.responses.stream(model="succ", input="a", temperature=0,
                                 text=ENUM_FORMAT) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    deltas = types.count("response.output_text.delta")
    assert deltas >= 1
    assert types == OPENING + ["response.output_text.delta"] * deltas + CLOSING + \
        ["response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.status == "completed" and final.output_text == '"bcd"'


def test_create_stream_true_ends_incomplete_when_cut(client):
    events = list(client.responses.create(model="succ", input="k", max_output_tokens=4,
                                          temperature=0, stream=True))
    assert [e.type for e in events][:4] == OPENING
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.output_text == "lmno"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "lmno"


def test_raw_sse_names_each_event_by_its_type(server):
    reply = post(server, "/v1/responses", {"model": "succ", "input": "a", "stream": True,
                                           "max_output_tokens": 2, "temperature": 0})
    assert reply.status_code == 200
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    blocks = reply.text.split("\n\n")
    assert blocks[-1] == "" and "[DONE]" not in reply.text
    for block in blocks[:-1]:
        name, data = block.split("\n")
        assert name == "event: " + json.loads(data[len("data: "):])["type"]


def test_refusals_are_openai_errors(client, server):
    with pytest.raises(openai.UnprocessableEntityError) as stored:
        client.responses.create(model="succ", input="a", store=True)
    assert stored.value.body["param"] == "store" and "stateless" in stored.value.body["message"]
    with pytest.raises(openai.UnprocessableEntityError):
        client.responses.create(model="succ", input="a", previous_response_id="resp_x")
    with pytest.raises(openai.UnprocessableEntityError) as builtin:
        client.responses.create(model="succ", input="a", tools=[{"type": "web_search_preview"}])
    assert builtin.value.body["param"] == "tools[0].type"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="nope", input="a")
    streamed = post(server, "/v1/responses", {"model": "succ", "input": [], "stream": True})
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "input"


def test_langchain_use_responses_api_invokes_and_streams(server):
    from langchain_openai import ChatOpenAI
    llm = ChatOpenAI(model="succ", base_url=server.http_url + "/v1", api_key="unused",
                     use_responses_api=True, max_tokens=3, temperature=0, max_retries=0)
    answer = llm.invoke([("system", "be brief"), ("human", "a")])
    assert answer.text == "bcd"
    assert answer.usage_metadata["output_tokens"] == 3
    assert answer.response_metadata["status"] == "incomplete"
    assert "".join(chunk.text for chunk in llm.stream("k")) == "lmn"


class FaultOnDemand:
    """Wraps the real Engine: the next step raises once `fail` is set."""

    def __init__(self, engine):
        self._engine = engine
        self.fail = threading.Event()

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def step(self):
        if self.fail.is_set():
            self.fail.clear()
            raise RuntimeError("injected step fault")
        return self._engine.step()


def test_an_engine_fault_after_the_head_is_response_failed(succ_model_dir):
    wrapped: list[FaultOnDemand] = []

    def wrap(engine):
        wrapped.append(FaultOnDemand(engine))
        return wrapped[0]
    with running_server(succ_model_dir, wrap_engine=wrap, step_delay_s=0.05) as server:
        body = {"model": "succ", "input": "a", "stream": True, "max_output_tokens": 200}
        with requests.post(server.http_url + "/v1/responses", json=body, stream=True,
                           timeout=TIMEOUT_S) as reply:
            assert reply.status_code == 200                 # the head went out: a stream
            lines = reply.iter_lines(decode_unicode=True)
            assert wait_for(lambda: next(lines) == "event: response.output_text.delta")
            wrapped[0].fail.set()
            rest = [line for line in lines if line]
    names = [line for line in rest if line.startswith("event: ")]
    assert names[-1] == "event: response.failed" and "event: response.completed" not in names
    failed = ResponseFailedEvent.model_validate_json(rest[-1][len("data: "):])
    assert failed.response.status == "failed" and failed.response.error.code == "server_error"
