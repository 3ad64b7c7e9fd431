"""The fixed request set of bench/api_diff.py: every public route of the API, once each way.

Chat whole and streamed (usage, logprobs, n=2, stop strings, a cut at max_tokens, a stop
string that spans tokens), tools (auto, required, a named function, parallel calls, a
tool's result sent back), response formats (json_object, json_schema), completions (whole,
streamed, echo with logprobs, a list of prompts), Responses (whole, streamed, tools,
instructions), embeddings from the chat model, tokenize / detokenize, the model list, and
the errors a client meets (bad JSON, unknown model, a missing field, too many stop
strings, a prompt past the context, an unknown route, a wrong method, a body too large).

Every request asks something different: the suffix store drafts from the answers a
server process gave before, so a repeat would be answered along another path. Sampling is
greedy (`temperature` 0) and answers are short (`max_tokens` 4-48). `quick` marks the
subset of a smoke run.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

MODEL = "smol-135m"                    # runtime.toml's default model
PROMPT_PAST_CONTEXT_WORDS = 9_000      # over smol-135m's 8,192 tokens: a word is 1+ tokens
BODY_PAST_LIMIT_BYTES = 9 * 1024 * 1024    # the HTTP layer refuses bodies over 8 MiB


@dataclass(frozen=True)
class ApiRequest:
    """One request of the set. `body` is a JSON document (dict) or raw bytes (a broken one);
    `declared_bytes` sends that Content-Length and no body (the server refuses it unread)."""
    name: str
    method: str
    path: str
    body: dict | bytes | None = None
    declared_bytes: int | None = None
    quick: bool = False

    def payload(self) -> bytes | None:
        if isinstance(self.body, dict):
            return json.dumps(self.body).encode()
        return self.body


def _chat(content: str, max_tokens: int = 16, **fields) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0, **fields}


USAGE = {"stream_options": {"include_usage": True}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
PERSON_SCHEMA = {"type": "json_schema", "json_schema": {
    "name": "person", "strict": True, "schema": {
        "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": False}}}
RESPONSES_WEATHER = {"type": "function", "name": "get_weather",
                     "description": "The current weather in a city.",
                     "parameters": WEATHER["function"]["parameters"]}


def chat_requests() -> list[ApiRequest]:
    post = lambda name, body, quick=False: ApiRequest(name, "POST", "/v1/chat/completions",
                                                        body, quick=quick)
    return [
        post("chat whole", _chat("Name three colours."), quick=True),
        post("chat stream", _chat("Name three animals.", stream=True), quick=True),
        post("chat stream usage", _chat("Name three fruits.", stream=True, **USAGE)),
        post("chat logprobs", _chat("Name a planet.", 6, logprobs=True, top_logprobs=3)),
        post("chat logprobs stream", _chat("Name a river.", 6, stream=True, logprobs=True,
                                           top_logprobs=2), quick=True),
        post("chat n=2", _chat("Say a word that rhymes with cat.", 8, n=2)),
        post("chat n=2 stream", _chat("Say a word that rhymes with dog.", 8, n=2, stream=True,
                                      **USAGE)),
        post("chat stop", _chat("Write two sentences about the sea.", 40, stop=["."])),
        post("chat stop stream", _chat("Write two sentences about the moon.", 40, stream=True,
                                       stop=[".", "\n"])),
        post("chat max_tokens cut", _chat("Tell me a long story about a dragon.", 3)),
        post("chat stop across tokens", _chat("Count from 1 to 10, separated by commas.", 40,
                                              stream=True, stop=["4, 5"]), quick=True),
        post("chat stop across tokens whole", _chat("Count from 1 to 12, separated by commas.",
                                                    48, stop=["3\n4."])),
        post("chat system and turns", {
            "model": MODEL, "max_tokens": 12, "temperature": 0, "messages": [
                {"role": "system", "content": "You answer in one short sentence."},
                {"role": "user", "content": "What is two plus two?"},
                {"role": "assistant", "content": "Two plus two is four."},
                {"role": "user", "content": "And three plus three?"}]}),
    ]


def tool_requests() -> list[ApiRequest]:
    post = lambda name, body, quick=False: ApiRequest(name, "POST", "/v1/chat/completions",
                                                        body, quick=quick)
    return [
        post("tools auto", _chat("What is the weather in Paris?", 40, tools=[WEATHER])),
        post("tools auto stream", _chat("What is the weather in Rome?", 40, tools=[WEATHER],
                                        stream=True)),
        post("tools required", _chat("Weather for Oslo, please.", 40, tools=[WEATHER, TIME],
                                     tool_choice="required"), quick=True),
        post("tools required stream", _chat("Weather for Lima, please.", 40,
                                            tools=[WEATHER, TIME], tool_choice="required",
                                            stream=True, **USAGE)),
        post("tools named", _chat("I am going to Cairo.", 40, tools=[WEATHER, TIME],
                                  tool_choice={"type": "function",
                                               "function": {"name": "get_time"}})),
        post("tools named stream", _chat("I am going to Delhi.", 40, tools=[WEATHER, TIME],
                                         tool_choice={"type": "function",
                                                      "function": {"name": "get_weather"}},
                                         stream=True), quick=True),
        post("tools parallel", _chat("Weather and time in Tokyo and in Berlin?", 96,
                                     tools=[WEATHER, TIME], tool_choice="required",
                                     parallel_tool_calls=True)),
        post("tools parallel stream", _chat("Weather and time in Madrid and in Seoul?", 96,
                                            tools=[WEATHER, TIME], tool_choice="required",
                                            parallel_tool_calls=True, stream=True)),
        post("tools result sent back", {
            "model": MODEL, "max_tokens": 16, "temperature": 0, "tools": [WEATHER], "messages": [
                {"role": "user", "content": "What is the weather in Vienna?"},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_fixed_vienna", "type": "function", "function": {
                        "name": "get_weather", "arguments": "{\"city\": \"Vienna\"}"}}]},
                {"role": "tool", "tool_call_id": "call_fixed_vienna",
                 "content": "{\"sky\": \"clear\", \"celsius\": 21}"}]}),
        post("json_object", _chat("Give a JSON object with a name and a colour.", 32,
                                  response_format={"type": "json_object"})),
        post("json_object stream", _chat("Give a JSON object with a city and a country.", 32,
                                         response_format={"type": "json_object"}, stream=True)),
        post("json_schema", _chat("Ana is 31 years old.", 32, response_format=PERSON_SCHEMA),
             quick=True),
        post("json_schema stream", _chat("Bo is 47 years old.", 32, response_format=PERSON_SCHEMA,
                                         stream=True, **USAGE)),
    ]


def completion_requests() -> list[ApiRequest]:
    post = lambda name, body, quick=False: ApiRequest(name, "POST", "/v1/completions", body,
                                                        quick=quick)
    base = {"model": MODEL, "temperature": 0}
    return [
        post("completions", {**base, "prompt": "The capital of France is", "max_tokens": 8},
             quick=True),
        post("completions stream", {**base, "prompt": "Once upon a time", "max_tokens": 8,
                                    "stream": True, **USAGE}),
        post("completions echo logprobs", {**base, "prompt": "One, two, three,", "max_tokens": 4,
                                           "echo": True, "logprobs": 2}),
        post("completions prompt list", {**base, "prompt": ["Red, green,", "Monday, Tuesday,"],
                                         "max_tokens": 5}),
    ]


def responses_requests() -> list[ApiRequest]:
    post = lambda name, body, quick=False: ApiRequest(name, "POST", "/v1/responses", body,
                                                        quick=quick)
    base = {"model": MODEL, "temperature": 0, "max_output_tokens": 16}
    return [
        post("responses", {**base, "input": "Name a musical instrument."}, quick=True),
        post("responses stream", {**base, "input": "Name a sport.", "stream": True}, quick=True),
        post("responses tools", {**base, "max_output_tokens": 64, "tools": [RESPONSES_WEATHER],
                                 "tool_choice": "required", "input": "Weather in Quito?"}),
        post("responses tools stream", {**base, "max_output_tokens": 64,
                                        "tools": [RESPONSES_WEATHER], "tool_choice": "required",
                                        "input": "Weather in Accra?", "stream": True}),
        post("responses instructions", {**base, "instructions": "Answer like a pirate.",
                                        "input": [{"role": "user", "content": "Hello there!"}]}),
    ]


def other_requests() -> list[ApiRequest]:
    return [
        ApiRequest("embeddings", "POST", "/v1/embeddings", {"model": MODEL, "input": "a red kite"},
                   quick=True),
        ApiRequest("embeddings list base64", "POST", "/v1/embeddings",
                   {"model": MODEL, "input": ["a blue boat", "a green hill"],
                    "encoding_format": "base64"}),
        ApiRequest("tokenize prompt", "POST", "/v1/tokenize",
                   {"model": MODEL, "prompt": "Tokenize this, please!"}, quick=True),
        ApiRequest("tokenize messages", "POST", "/v1/tokenize",
                   {"model": MODEL, "messages": [{"role": "user", "content": "Hi there"}]}),
        ApiRequest("detokenize", "POST", "/v1/detokenize",
                   {"model": MODEL, "tokens": [504, 3458, 314, 253, 1345, 30]}),
        ApiRequest("models", "GET", "/v1/models", quick=True),
        ApiRequest("model", "GET", f"/v1/models/{MODEL}"),
    ]


def error_requests() -> list[ApiRequest]:
    chat = "/v1/chat/completions"
    return [
        ApiRequest("error bad json", "POST", chat, b'{"model": "smol-135m", "messages": [',
                   quick=True),
        ApiRequest("error unknown model", "POST", chat, {**_chat("Hi from nowhere."),
                                                         "model": "no-such-model"}),
        ApiRequest("error unknown model stream", "POST", chat,
                   {**_chat("Hi from elsewhere.", stream=True), "model": "no-such-model"}),
        ApiRequest("error missing messages", "POST", chat,
                   {"model": MODEL, "max_tokens": 4}),
        ApiRequest("error too many stop strings", "POST", chat,
                   _chat("Stop me.", 4, stop=["a", "b", "c", "d", "e"]), quick=True),
        ApiRequest("error prompt past context", "POST", "/v1/completions",
                   {"model": MODEL, "max_tokens": 4,
                    "prompt": " ".join(["word"] * PROMPT_PAST_CONTEXT_WORDS)}),
        ApiRequest("error unknown route", "GET", "/v1/nothing-here", quick=True),
        ApiRequest("error wrong method", "GET", chat),
        ApiRequest("error body too large", "POST", chat, declared_bytes=BODY_PAST_LIMIT_BYTES),
        ApiRequest("error bad field type", "POST", "/v1/embeddings", {"model": MODEL, "input": 7}),
    ]


def request_set(quick: bool = False) -> list[ApiRequest]:
    """The whole set in a fixed order (or its quick subset); no two requests alike."""
    every = (chat_requests() + tool_requests() + completion_requests() + responses_requests()
             + other_requests() + error_requests())
    return [r for r in every if r.quick or not quick]
