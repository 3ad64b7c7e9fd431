"""Validation (400 bad value, 422 unserved value) and the response documents, without sockets or an engine."""
from __future__ import annotations

import json

import pytest

from server.api import documents as docs
from server.errors import ApiError
from server.text.messages import Message
from server.api.chat.request import MAX_MESSAGES, parse_chat
from server.api.completions import MAX_COMPLETION_PROMPTS, parse_completion
from server.api.embeddings import MAX_EMBEDDING_INPUTS, parse_embeddings
from server.api.generation import DEFAULT_MAX_STOP_STRINGS, MAX_CHOICES, parse_priority
from server.api.tokenize import parse_detokenize, parse_tokenize


def chat(**fields) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    body.update(fields)
    return json.dumps(body).encode()


def refused(parse, body: bytes) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse(body)
    return info.value


@pytest.mark.parametrize("fields, param", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": 2.01}, "temperature"),
    ({"temperature": "hot"}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"stop": [f"s{i}" for i in range(5)]}, "stop"), ({"stop": [1]}, "stop"),
    ({"presence_penalty": 3}, "presence_penalty"), ({"frequency_penalty": -2.5},
                                                    "frequency_penalty"),
    ({"presence_penalty": -2.5}, "presence_penalty"), ({"frequency_penalty": 2.5},
                                                       "frequency_penalty"),
    ({"min_p": -0.1}, "min_p"),
    ({"logit_bias": {"x": 1}}, "logit_bias"), ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"top_logprobs": 3}, "top_logprobs"), ({"logprobs": True, "top_logprobs": 21},
                                            "top_logprobs"),
    ({"seed": "1"}, "seed"), ({"stream": "yes"}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"n": 0}, "n"), ({"n": MAX_CHOICES + 1}, "n"), ({"min_p": 2}, "min_p"), ({"top_k": -2}, "top_k"),
    ({"repetition_penalty": 0}, "repetition_penalty"), ({"min_tokens": -1}, "min_tokens"),
    ({"stop_token_ids": [-1]}, "stop_token_ids"), ({"model": 5}, "model"),
    ({"messages": []}, "messages"), ({"messages": [{"role": "robot", "content": "x"}]},
                                     "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
])
def test_out_of_range_values_are_400_naming_the_field(fields, param):
    err = refused(parse_chat, chat(**fields))
    assert err.status == 400 and err.param == param
    assert err.document()["error"]["type"] == "invalid_request_error"


def test_stop_takes_four_sequences_unless_the_server_allows_more():
    assert DEFAULT_MAX_STOP_STRINGS == 4                   # OpenAI's limit
    four = [f"s{i}" for i in range(4)]
    assert parse_chat(chat(stop=four)).stop == tuple(four)
    assert parse_completion(json.dumps({"model": "m", "prompt": "p", "stop": four}).encode()).stop \
        == tuple(four)
    err = refused(parse_completion, json.dumps({"model": "m", "prompt": "p",
                                                "stop": four + ["s4"]}).encode())
    assert err.status == 400 and err.param == "stop" and "at most 4" in err.message
    # `[engine].max_stop_strings` raises it (evaluation harnesses send more)
    sixteen = [f"s{i}" for i in range(16)]
    assert parse_chat(chat(stop=sixteen), max_stop_strings=16).stop == tuple(sixteen)
    with pytest.raises(ApiError) as info:
        parse_chat(chat(stop=sixteen + ["s16"]), max_stop_strings=16)
    assert info.value.param == "stop" and "at most 16" in info.value.message


@pytest.mark.parametrize("fields, param", [
    ({"functions": []}, "functions"), ({"function_call": "auto"}, "function_call"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a+"}, "guided_regex"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"},
                                                {"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[1].type"),
])
def test_unsupported_values_are_422(fields, param):
    err = refused(parse_chat, chat(**fields))
    assert err.status == 422 and err.param == param
    assert err.document()["error"]["code"] == "unsupported_parameter"


def test_bad_json_and_missing_model():
    assert refused(parse_chat, b"[1, 2]").document()["error"]["code"] == "invalid_json"
    assert refused(parse_chat, b"\xff").status == 400
    err = refused(parse_chat, json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode())
    assert err.param == "model"


def test_valid_chat_maps_every_sampling_field():
    spec = parse_chat(chat(temperature=0, top_p=0.5, top_k=40, min_p=0.1, seed=7,
                           stop="END", max_completion_tokens=9, presence_penalty=1,
                           frequency_penalty=-1, logit_bias={"65": -100}, logprobs=True,
                           top_logprobs=2, ignore_eos=True, min_tokens=3,
                           stop_token_ids=[5], repetition_penalty=1.2, unknown_field={"x": 1},
                           stream=True, stream_options={"include_usage": True}, user="u"))
    p = spec.params
    assert (p.temperature, p.top_p, p.top_k, p.min_p) == (0.0, 0.5, 40, 0.1)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (1.0, -1.0, 1.2)
    assert p.logit_bias == ((65, -100.0),) and p.logprobs and p.top_logprobs == 2
    assert p.ignore_eos and p.min_tokens == 3
    assert spec.seed == 7 and spec.stop == ("END",) and spec.max_tokens == 9
    assert spec.stop_ids == (5,) and spec.stream and spec.include_usage
    assert spec.messages == (Message("user", "hi"),)
    assert parse_chat(chat()).max_tokens is None
    assert parse_chat(chat(top_k=-1)).params.top_k == 0


def test_completion_prompt_forms_and_defaults():
    body = {"model": "m", "prompt": "hello"}
    spec = parse_completion(json.dumps(body).encode())
    assert spec.prompts == ("hello",) and spec.max_tokens == 16 and spec.kind == "completion"
    assert parse_completion(json.dumps(dict(body, prompt=[1, 2])).encode()).prompts == ((1, 2),)
    assert parse_completion(json.dumps(dict(body, prompt=["x"])).encode()).prompts == ("x",)
    assert parse_completion(json.dumps(dict(body, prompt=["x", "y"])).encode()
                            ).prompts == ("x", "y")
    assert parse_completion(json.dumps(dict(body, prompt=[[1], [2, 3]])).encode()
                            ).prompts == ((1,), (2, 3))
    for bad_prompt in ([], [[]], ["x", 1], [["x"]], [[1, -1]], 3):
        assert refused(parse_completion, json.dumps(dict(body, prompt=bad_prompt)).encode()
                       ).param == "prompt"
    too_many = ["x"] * (MAX_COMPLETION_PROMPTS + 1)
    assert refused(parse_completion, json.dumps(dict(body, prompt=too_many)).encode()
                   ).param == "prompt"
    assert parse_completion(json.dumps(dict(body, echo=True)).encode()).echo
    assert refused(parse_completion, json.dumps(dict(body, best_of=2)).encode()).status == 422
    assert refused(parse_completion, json.dumps(dict(body, suffix="s")).encode()).status == 422
    assert refused(parse_completion, json.dumps(dict(body, logprobs=21)).encode()).param == "logprobs"
    assert parse_completion(json.dumps(dict(body, logprobs=20)).encode()).top_logprobs == 20
    zero = dict(body, max_tokens=0)
    assert refused(parse_completion, json.dumps(zero).encode()).param == "max_tokens"
    assert parse_completion(json.dumps(dict(zero, echo=True)).encode()).max_tokens == 0
    assert refused(parse_chat, chat(max_tokens=0)).param == "max_tokens"
    spec = parse_completion(json.dumps(dict(body, logprobs=2)).encode())
    assert spec.params.logprobs and spec.top_logprobs == 2
    assert refused(parse_completion, b'{"model": "m"}').param == "prompt"


def test_embeddings_dimensions_is_422_saying_the_model_was_not_trained_for_it():
    err = refused(parse_embeddings, b'{"model": "m", "input": "a", "dimensions": 8}')
    assert err.status == 422 and err.param == "dimensions"
    assert err.document()["error"]["code"] == "unsupported_parameter"
    assert "not trained for reduced dimensions" in err.message and "Matryoshka" in err.message


def test_embeddings_tokenize_priority():
    spec = parse_embeddings(b'{"model": "m", "input": "a"}')
    assert spec.inputs == ("a",) and spec.encoding_format == "float"
    spec = parse_embeddings(b'{"model": "m", "input": ["a", [1, 2]], "encoding_format": "base64"}')
    assert spec.inputs == ("a", (1, 2)) and spec.encoding_format == "base64"
    assert parse_embeddings(b'{"model": "m", "input": ""}').inputs == ("",)   # an encoder's [CLS] [SEP]
    assert refused(parse_embeddings, b'{"model": "m", "input": [[]]}').param == "input"
    assert refused(parse_embeddings, b'{"model": "m", "input": "a", "encoding_format": "hex"}'
                   ).param == "encoding_format"
    assert parse_tokenize(b'{"model": "m", "prompt": "x"}').prompt == "x"
    assert parse_tokenize(b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
                          ).messages[0].content == "x"
    assert parse_detokenize(b'{"model": "m", "tokens": [1]}').tokens == (1,)
    assert parse_priority(None) == 0 and parse_priority("-100") == -100
    for bad_value in ("101", "x", "1.5"):
        with pytest.raises(ApiError):
            parse_priority(bad_value)


def test_documents_have_the_openai_fields():
    h = docs.Header("chatcmpl-1", 1700000000, "m")
    doc = docs.chat_completion(h, "hi", "stop", docs.usage(2, 1))
    assert doc["object"] == "chat.completion" and doc["usage"]["total_tokens"] == 3
    assert doc["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    chunk = docs.chat_chunk(h, {"content": "x"}, "length")
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"][0]["finish_reason"] == "length"
    assert docs.chat_usage_chunk(h, docs.usage(1, 1))["choices"] == []
    assert docs.new_id("chatcmpl").startswith("chatcmpl-") and docs.new_id("x") != docs.new_id("x")
    doc = docs.embeddings("m", [[1.0, -2.5], "AACAPw=="], 3)   # placed as encoded
    assert [d["embedding"] for d in doc["data"]] == [[1.0, -2.5], "AACAPw=="]
    assert [d["index"] for d in doc["data"]] == [0, 1] and doc["data"][0]["object"] == "embedding"
    assert doc["object"] == "list" and doc["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    lp = docs.completion_logprobs([("a", -0.1, [("a", b"a", -0.1)]), ("bc", -0.2, [])])
    assert lp["text_offset"] == [0, 1] and lp["top_logprobs"][0] == {"a": -0.1}


def test_error_bodies_use_the_one_compact_json_encoding():
    from server.errors import error_response
    from server.replies import JSON_CONTENT_TYPE, json_bytes
    err = ApiError("invalid_request", "bad 'é'", param="temperature")
    response = error_response(err, (("X-Request-Id", "r1"),))
    assert response.body == (b'{"error":{"message":"bad \'\xc3\xa9\'","type":'
                             b'"invalid_request_error","param":"temperature","code":null}}')
    assert response.body == json_bytes(err.document())
    assert response.headers[0] == JSON_CONTENT_TYPE == ("Content-Type", "application/json")
    assert ("X-Request-Id", "r1") in response.headers


def test_tokenize_messages_have_the_chat_bounds():
    """/v1/tokenize renders messages like chat does, so it takes the same messages."""
    too_many = [{"role": "user", "content": "x"}] * (MAX_MESSAGES + 1)
    for parse in (parse_chat, parse_tokenize):
        err = refused(parse, json.dumps({"model": "m", "messages": too_many}).encode())
        assert err.param == "messages" and str(MAX_MESSAGES) in err.message
        assert refused(parse, b'{"model": "m", "messages": []}').param == "messages"
        assert refused(parse, b'{"model": "m", "messages": [{"role": "x", "content": ""}]}'
                       ).param == "messages[0].role"
    ok = [{"role": "user", "content": "x"}] * MAX_MESSAGES
    assert len(parse_tokenize(json.dumps({"model": "m", "messages": ok}).encode()).messages) \
        == MAX_MESSAGES


@pytest.mark.parametrize("fields", [
    {"presence_penalty": -2}, {"presence_penalty": 2}, {"frequency_penalty": -2},
    {"frequency_penalty": 2}, {"min_p": 0}, {"min_p": 1},
])
def test_penalty_and_min_p_bounds_are_inclusive(fields):
    (name, value), = fields.items()
    assert getattr(parse_chat(chat(**fields)).params, name) == value


def test_embeddings_accept_2048_inputs_and_refuse_2049():
    assert MAX_EMBEDDING_INPUTS == 2048                    # OpenAI's limit; LangChain sends 1,000
    body = {"model": "m", "input": ["x"] * 2048}
    assert len(parse_embeddings(json.dumps(body).encode()).inputs) == 2048
    body["input"].append("x")
    assert refused(parse_embeddings, json.dumps(body).encode()).param == "input"


@pytest.mark.parametrize("body", [
    b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",   # RecursionError
    b'{"model": "m", "max_tokens": ' + b"1" * 5_000 + b"}",                    # > 4,300 digits
])
def test_bodies_json_cannot_parse_are_400_invalid_json_not_500(body):
    err = refused(parse_chat, body)
    assert err.status == 400 and err.document()["error"]["code"] == "invalid_json"


def test_a_guided_json_text_nested_too_deeply_is_a_400_naming_the_field():
    deep = "[" * 100_000 + "]" * 100_000
    err = refused(parse_chat, chat(guided_json=deep))
    assert err.status == 400 and err.param == "guided_json"
