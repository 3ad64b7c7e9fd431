"""Structured outputs through the real server on the tiny random Llama: openai-python's
`chat.completions.parse` with a pydantic model, vLLM's guided_* extras, and the errors."""
from __future__ import annotations

import enum
import json
import re
from typing import Optional

import jsonschema
import pydantic
import pytest

from engine.api import MAX_COMPILE_WORK, MAX_SCHEMA_DEPTH
from tests.e2e.helpers import chat_body, client_fixture, post, server_fixture


class Color(str, enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=8)
    zip_code: int = pydantic.Field(ge=1000, le=99999)


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=8)
    favourite: Color
    address: Address
    nickname: Optional[str] = pydantic.Field(default=None, max_length=5)
    scores: list[int] = pydantic.Field(max_length=3)


server = server_fixture("tiny_llama_dir")
client = client_fixture(timeout_s=60)


def test_openai_parse_returns_a_pydantic_object(client, tiny_llama_dir):
    for seed in (1, 2, 3):
        done = client.chat.completions.parse(
            model=tiny_llama_dir.name, messages=[{"role": "user", "content": "A person, please"}],
            response_format=Person, temperature=1.0, seed=seed, max_tokens=400)
        choice = done.choices[0]
        assert choice.finish_reason == "stop"
        assert isinstance(choice.message.parsed, Person)
        assert isinstance(choice.message.parsed.address, Address)


def test_json_object_and_guided_extras(server, tiny_llama_dir):
    model = tiny_llama_dir.name
    # a random 265-token model closes an unbounded string rarely: bias '"' and '}' (byte ids) so
    # the answer ends well inside its 512-token context; the grammar still decides what is legal
    r = post(server, "/v1/chat/completions", chat_body("json", model=model, seed=4, max_tokens=300,
                                                       logit_bias={"34": 4, "125": 4},
                                                       response_format={"type": "json_object"}))
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "stop" and isinstance(json.loads(r.json()["choices"][0]["message"]["content"]), dict)
    r = post(server, "/v1/chat/completions", chat_body("pick", model=model, seed=5, guided_choice=["yes", "no"]))
    assert r.json()["choices"][0]["message"]["content"] in ("yes", "no")
    r = post(server, "/v1/completions", {"model": model, "prompt": "id:", "seed": 6, "max_tokens": 30,
                                         "guided_regex": r"[A-Z]{2}-\d{3}"})
    assert re.fullmatch(r"[A-Z]{2}-\d{3}", r.json()["choices"][0]["text"])
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 9}},
              "required": ["n"]}
    r = post(server, "/v1/chat/completions", chat_body("n", model=model, seed=7, max_tokens=100,
                                                       structured_outputs={"json": schema}))
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), schema)


def test_text_format_is_a_no_op_and_length_cuts_report_length(server, tiny_llama_dir):
    model = tiny_llama_dir.name
    plain = post(server, "/v1/chat/completions", chat_body("hi", model=model, temperature=0, max_tokens=8))
    text = post(server, "/v1/chat/completions", chat_body("hi", model=model, temperature=0, max_tokens=8,
                                                          response_format={"type": "text"}))
    assert plain.json()["choices"][0]["message"] == text.json()["choices"][0]["message"]
    cut = post(server, "/v1/chat/completions", chat_body("hi", model=model, max_tokens=2, seed=1,
                                                         response_format={"type": "json_object"}))
    assert cut.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("fields, status, param, words", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "number", "multipleOf": 0.5}}}}}},
     422, "response_format.json_schema.schema", "$.properties.a.multipleOf"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
     400, "response_format.json_schema.schema", "type"),
    ({"response_format": {"type": "xml"}}, 400, "response_format", "type"),
    ({"guided_regex": "(?<=a)b"}, 422, "guided_regex", "look-behind"),
    ({"guided_choice": []}, 400, "guided_choice", "list"),
])
def test_errors_name_the_field(server, tiny_llama_dir, fields, status, param, words):
    r = post(server, "/v1/chat/completions", chat_body("x", model=tiny_llama_dir.name, **fields))
    error = r.json()["error"]
    assert r.status_code == status and error["param"] == param and words in error["message"], r.text


def _nested_arrays(levels: int) -> dict:
    schema: dict = {"type": "integer", "minimum": 0, "maximum": 9}
    for _ in range(levels - 1):
        schema = {"type": "array", "items": schema, "minItems": 1, "maxItems": 1}
    return schema


def test_schemas_past_the_compile_limits_are_400_naming_limit_and_path(server, tiny_llama_dir):
    model = tiny_llama_dir.name
    deep = _nested_arrays(MAX_SCHEMA_DEPTH + 1)
    path = "$" + ".items" * MAX_SCHEMA_DEPTH
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": deep}}},
         "response_format.json_schema.schema", [path, "MAX_SCHEMA_DEPTH", str(MAX_SCHEMA_DEPTH)]),
        ({"guided_json": json.dumps(_nested_arrays(50))}, "guided_json", ["MAX_SCHEMA_DEPTH"]),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}]},
         "tools[0].function.parameters", [path, "MAX_SCHEMA_DEPTH"]),
        ({"guided_regex": "((a{1000}){1000}){1000}"}, "guided_regex", ["MAX_COMPILE_WORK", str(MAX_COMPILE_WORK)]),
    ]
    for fields, param, words in cases:
        r = post(server, "/v1/chat/completions", chat_body("x", model=model, max_tokens=4, **fields))
        error = r.json()["error"]
        assert r.status_code == 400 and error["type"] == "invalid_request_error", r.text
        assert error["param"] == param and all(w in error["message"] for w in words), r.text
    at_limit = {"type": "json_schema", "json_schema": {"name": "deep", "schema": _nested_arrays(MAX_SCHEMA_DEPTH)}}
    ok = post(server, "/v1/chat/completions", chat_body("x", model=model, max_tokens=400, temperature=1.0, seed=1,
                                                         response_format=at_limit))
    assert ok.status_code == 200, ok.text
    choice = ok.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice         # every level written, then closed
    jsonschema.validate(json.loads(choice["message"]["content"]), at_limit["json_schema"]["schema"])
