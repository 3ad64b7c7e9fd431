"""The contract's worked example (docs/CONTRACT.md) and the API's conformance cases, over real sockets, on the
succ bigram (byte i -> i + 1; template `{% for m in messages %}{{ m.content }}{% endfor %}`)."""
from __future__ import annotations

import json
import socket

import requests

from tests.e2e.helpers import (TIMEOUT_S, chat_body, chat_stream_text, post, running_server,
                               server_fixture, stream_chunks)


server = server_fixture("succ_model_dir")


def test_hand_example_chat_completion(server):
    r = post(server, "/v1/chat/completions", chat_body("a", max_tokens=3, temperature=0))
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("application/json")
    doc = r.json()
    assert doc["object"] == "chat.completion"
    assert doc["id"].startswith("chatcmpl-")
    assert doc["model"] == "succ"
    assert isinstance(doc["created"], int) and doc["created"] > 1_600_000_000
    assert doc["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "bcd"},
                               "logprobs": None, "finish_reason": "length"}]
    assert doc["usage"] == {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}


def test_stream_framing_role_first_then_done(server):
    body = chat_body("a", max_tokens=3, temperature=0, stream=True,
                     stream_options={"include_usage": True})
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    raw = r.content
    assert raw.count(b"\n\n") == 6 and raw.endswith(b"data: [DONE]\n\n")
    chunks, done = stream_chunks(r)
    assert done and len(chunks) == 5                      # role, b, c, d, usage (+ [DONE])
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:4]]
    assert contents == ["b", "c", "d"]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks[:4]]
    assert finishes == [None, None, None, "length"]       # on the last content chunk
    assert chunks[4]["choices"] == []
    assert chunks[4]["usage"] == {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
    # without include_usage: no usage chunk
    r = post(server, "/v1/chat/completions", chat_body("a", max_tokens=2, temperature=0,
                                                       stream=True))
    chunks, done = stream_chunks(r)
    assert done and all("usage" not in c for c in chunks) and len(chunks) == 3


def test_stop_strings_end_generation_across_tokens(server):
    body = chat_body("a", max_tokens=10, temperature=0, stop=["de"])
    doc = post(server, "/v1/chat/completions", body).json()
    assert doc["choices"][0]["message"]["content"] == "bc"
    assert doc["choices"][0]["finish_reason"] == "stop"
    assert doc["usage"]["completion_tokens"] == 4           # b, c, d, e were generated
    r = post(server, "/v1/chat/completions", dict(body, stream=True))
    chunks, done = stream_chunks(r)
    assert done
    assert chat_stream_text(chunks) == "bc"
    content_chunks = [c for c in chunks if c["choices"]]
    assert content_chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in content_chunks[:-1])
    # a single stop string, and the completions endpoint
    doc = post(server, "/v1/completions", {"model": "succ", "prompt": "a", "stop": "e",
                                           "max_tokens": 10, "temperature": 0}).json()
    assert doc["choices"][0]["text"] == "bcd" and doc["choices"][0]["finish_reason"] == "stop"


def test_completions_endpoint_and_usage(server):
    r = post(server, "/v1/completions", {"model": "succ", "prompt": "a", "temperature": 0})
    assert r.status_code == 200
    doc = r.json()
    assert doc["object"] == "text_completion" and doc["id"].startswith("cmpl-")
    assert doc["choices"][0]["text"] == "bcdefghijklmnopq"   # the default 16 tokens
    assert doc["choices"][0]["finish_reason"] == "length"
    assert doc["usage"] == {"prompt_tokens": 1, "completion_tokens": 16, "total_tokens": 17}
    # token-id prompt, explicit max_tokens, streamed with usage
    r = post(server, "/v1/completions", {"model": "succ", "prompt": [120], "max_tokens": 2,
                                         "temperature": 0, "stream": True,
                                         "stream_options": {"include_usage": True}})
    chunks, done = stream_chunks(r)
    assert done
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "yz"
    assert chunks[-1]["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}


BAD_REQUESTS = [
    # (path, body or raw bytes, status, param, code)
    ("/v1/chat/completions", b"{not json", 400, None, "invalid_json"),
    ("/v1/chat/completions", chat_body("a", temperature=-1), 400, "temperature", None),
    ("/v1/chat/completions", chat_body("a", temperature=2.5), 400, "temperature", None),
    ("/v1/chat/completions", chat_body("a", top_p=0), 400, "top_p", None),
    ("/v1/chat/completions", chat_body("a", max_tokens=0), 400, "max_tokens", None),
    ("/v1/chat/completions", chat_body("a", stop=[str(i) for i in range(5)]), 400, "stop", None),
    ("/v1/chat/completions", {"model": "succ"}, 400, "messages", None),
    ("/v1/chat/completions", chat_body("a", n=9), 400, "n", None),
    ("/v1/completions", {"model": "succ", "prompt": "a", "suffix": "z"}, 422, "suffix",
     "unsupported_parameter"),
    ("/v1/chat/completions", {"model": "succ", "messages": [
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}, 422,
     "messages[0].content[0].type", "unsupported_parameter"),
    ("/v1/chat/completions", chat_body("a", functions=[{"name": "f"}]), 422, "functions",
     "unsupported_parameter"),
    ("/v1/chat/completions", chat_body("a", model="gpt-4o"), 404, "model", "model_not_found"),
    ("/v1/chat/completions", chat_body("a", max_tokens=5000), 400, "messages",
     "context_length_exceeded"),
]


def test_errors_use_the_openai_shape(server):
    assert len(BAD_REQUESTS) == 13
    for path, body, status, param, code in BAD_REQUESTS:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = requests.post(server.http_url + path, data=data, timeout=TIMEOUT_S,
                          headers={"Content-Type": "application/json"})
        assert r.status_code == status, (body, r.text)
        assert r.headers["Content-Type"].startswith("application/json")
        assert r.headers.get("X-Request-Id")
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["message"] and isinstance(err["message"], str)
        assert err["type"] == "invalid_request_error"
        assert err["param"] == param, (body, err)
        assert err["code"] == code, (body, err)
    # route errors, same shape
    r = requests.get(server.http_url + "/v1/nothing", timeout=TIMEOUT_S)
    assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = requests.get(server.http_url + "/v1/chat/completions", timeout=TIMEOUT_S)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in r.headers["Allow"]
    # headers: priority range, KV handles
    r = post(server, "/v1/chat/completions", chat_body("a", max_tokens=1),
             headers={"X-TL-Priority": "101"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "X-TL-Priority"
    r = post(server, "/v1/chat/completions", chat_body("a", max_tokens=1),
             headers={"X-TL-Priority": "-100"})
    assert r.status_code == 200
    r = post(server, "/v1/chat/completions", chat_body("a", max_tokens=1),
             headers={"X-TL-KV-Handle": "abc"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "kv_handle_not_found"


def test_tokenize_models_health_and_request_id(server):
    r = post(server, "/v1/tokenize", {"model": "succ", "prompt": "ab"},
             headers={"X-Request-Id": "trace-123"})
    assert r.status_code == 200 and r.headers["X-Request-Id"] == "trace-123"
    doc = r.json()
    assert doc["tokens"] == [97, 98] and doc["count"] == 2 and doc["max_model_len"] == 1024
    r = post(server, "/v1/tokenize", {"model": "succ", "messages": [
        {"role": "user", "content": "x"}, {"role": "user", "content": "y"}]})
    assert r.json()["tokens"] == [120, 121]
    r = post(server, "/v1/detokenize", {"model": "succ", "tokens": [104, 105]})
    assert r.json() == {"prompt": "hi"}
    models = requests.get(server.http_url + "/v1/models", timeout=TIMEOUT_S)
    assert models.status_code == 200
    listing = models.json()
    assert listing["object"] == "list" and [m["id"] for m in listing["data"]] == ["succ"]
    assert listing["data"][0]["object"] == "model"
    one = requests.get(server.http_url + "/v1/models/succ", timeout=TIMEOUT_S)
    assert one.status_code == 200 and one.json()["id"] == "succ"
    missing = requests.get(server.http_url + "/v1/models/other", timeout=TIMEOUT_S,
                           headers={"X-Request-Id": "r-404"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert missing.headers["X-Request-Id"] == "r-404"
    for url in (server.http_url + "/healthz", server.health_url + "/healthz",
                server.health_url + "/readyz"):
        r = requests.get(url, timeout=TIMEOUT_S)
        assert r.status_code == 200 and r.headers["X-Request-Id"]
    r = requests.get(server.health_url + "/metrics", timeout=TIMEOUT_S)
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "tl_engine_kv_blocks{model=\"succ\",state=\"used\"}" in r.text   # the model label
    # generated ids are unique, and a 404 route still carries one
    ids = {requests.get(server.http_url + "/nope", timeout=TIMEOUT_S).headers["X-Request-Id"]
           for _ in range(3)}
    assert len(ids) == 3
    # a streamed answer echoes it too
    r = post(server, "/v1/chat/completions", chat_body("a", max_tokens=1, stream=True),
             headers={"X-Request-Id": "stream-7"})
    assert r.headers["X-Request-Id"] == "stream-7"


def test_keep_alive_connection_serves_several_requests(server):
    host, port = server.http_addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
        sock.sendall(request * 2)
        received = b""
        while received.count(b'"object":"list"') < 2:
            data = sock.recv(65536)
            assert data
            received += data
    assert received.count(b"HTTP/1.1 200") == 2


def test_special_token_text_in_a_message_becomes_the_special_token(server):
    """A deliberate choice (docs/models.md, "Special tokens in user text"): like Hugging Face's
    apply_chat_template + encode, vLLM and llama.cpp, the rendered prompt is tokenized with
    special-token text parsed, so "<|endoftext|>" typed by a user is the EOS id (256 for the
    succ byte tokenizer), not its 13 bytes. The oracle's prompt ids depend on this."""
    r = post(server, "/v1/tokenize", {"model": "succ", "messages": [
        {"role": "user", "content": "a<|endoftext|>b"}]})
    assert r.status_code == 200
    assert r.json()["tokens"] == [97, 256, 98]


def test_token_ids_past_the_vocabulary_are_400_on_every_route(server):
    """A token id the tokenizer does not have is the client's mistake on every route that
    takes ids (completions, embeddings, detokenize): 400 naming the field, never a 500."""
    past = 10_000                                        # the succ vocabulary has 257 ids
    cases = [("/v1/completions", {"model": "succ", "prompt": [97, past], "max_tokens": 1},
              "prompt"),
             ("/v1/embeddings", {"model": "succ", "input": [97, past]}, "input"),
             ("/v1/embeddings", {"model": "succ", "input": ["a", [past]]}, "input"),
             ("/v1/detokenize", {"model": "succ", "tokens": [past]}, "tokens")]
    for path, body, param in cases:
        r = post(server, path, body)
        assert r.status_code == 400, (path, body, r.text)
        err = r.json()["error"]
        assert err["param"] == param and "vocabulary" in err["message"], err


def test_an_empty_string_is_not_embedded_by_the_chat_model(server):
    """A chat model has no [CLS] to embed "" with: 400 naming the input (an embedding
    model embeds it as [CLS] [SEP], as sentence-transformers does)."""
    r = post(server, "/v1/embeddings", {"model": "succ", "input": ["a", ""]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input", r.text


def test_logit_bias_id_past_the_vocabulary_is_400_naming_it(server):
    """The sampler skips a bias it cannot index; the client must hear that its id is wrong."""
    past = 10_257                                        # the succ vocabulary has 257 ids
    bias = {"98": 5, str(past): -100}
    for path, body in (("/v1/chat/completions", chat_body("a", max_tokens=1, logit_bias=bias)),
                       ("/v1/completions", {"model": "succ", "prompt": "a", "max_tokens": 1,
                                            "logit_bias": bias})):
        r = post(server, path, body)
        assert r.status_code == 400, (path, r.text)
        err = r.json()["error"]
        assert err["param"] == "logit_bias" and str(past) in err["message"], err
    inside = post(server, "/v1/completions", {"model": "succ", "prompt": "a", "max_tokens": 1,
                                              "temperature": 0, "logit_bias": {"256": 100}})
    assert inside.status_code == 200 and inside.json()["choices"][0]["finish_reason"] == "stop"


def test_streamed_completion_text_offsets_run_on_like_the_plain_answer(server):
    body = {"model": "succ", "prompt": "a", "max_tokens": 4, "temperature": 0, "logprobs": 1}
    plain = post(server, "/v1/completions", body).json()["choices"][0]["logprobs"]
    assert plain["tokens"] == ["b", "c", "d", "e"] and plain["text_offset"] == [0, 1, 2, 3]
    chunks, done = stream_chunks(post(server, "/v1/completions", dict(body, stream=True)))
    assert done
    logprobs = [c["choices"][0]["logprobs"] for c in chunks if c["choices"]]
    assert [t for lp in logprobs for t in lp["tokens"]] == plain["tokens"]
    assert [o for lp in logprobs for o in lp["text_offset"]] == plain["text_offset"]


def test_a_server_configured_for_more_stop_strings_takes_them(succ_model_dir):
    """`[engine].max_stop_strings` reaches the wire: 16 sequences served, 17 a 400."""
    with running_server(succ_model_dir, max_stop_strings=16) as handle:
        stops = [f"x{i}" for i in range(15)] + ["cd"]
        doc = post(handle, "/v1/chat/completions",
                   chat_body("a", max_tokens=8, temperature=0, stop=stops)).json()
        assert doc["choices"][0]["message"]["content"] == "b"
        assert doc["choices"][0]["finish_reason"] == "stop"
        r = post(handle, "/v1/chat/completions", chat_body("a", stop=stops + ["x99"]))
        assert r.status_code == 400 and r.json()["error"]["param"] == "stop"
        assert "at most 16" in r.json()["error"]["message"]
