"""The gateway in front of the API: API keys, CORS, the loading state, the access log."""
from __future__ import annotations

import json
from dataclasses import replace

from server.door.access import AccessLog, Entry, LoggedStream
from server.door.auth import ApiKeyCheck, bearer_token, needs_key
from server.door.cors import CorsPolicy
from server.door.gateway import GatewayApp, LoadingApp
from server.http.protocol import Request, Response, ResponseHead, StreamPoll
from server.api.routes import API_ROUTES
from server.observe.health import HEALTH_ROUTES

KEY = "sk-test-0123456789"


def req(method="GET", path="/v1/models", headers=(), body=b"", peer="10.0.0.7:5000"):
    return Request(method=method, path=path, headers=tuple((k.lower(), v) for k, v in headers),
                   body=body, peer=peer)


class Echo:
    """A stand-in API app: 200 with the path, or a stream for /v1/stream."""

    def __init__(self):
        self.seen = []

    def handle(self, request):
        self.seen.append(request.path)
        if request.path == "/v1/stream":
            return FakeStream()
        return Response(status=200, headers=(("X-Request-Id", "req-1"),), body=b'{"ok":1}')

    def error(self, kind, message, path=""):
        raise AssertionError("not used")


class FakeStream:
    def __init__(self):
        self.polls = [StreamPoll(head=ResponseHead(status=200, headers=(("X-Request-Id", "r-s"),)),
                                 chunks=[b"data: 1\n\n"]),
                      StreamPoll(chunks=[b"data: [DONE]\n\n"], done=True)]
        self.cancelled = False

    def poll(self, now_s):
        return self.polls.pop(0)

    def has_output(self):
        return bool(self.polls)

    def next_deadline_s(self):
        return None

    def cancel(self):
        self.cancelled = True

    def access_fields(self):
        return {"model": "succ", "prompt_tokens": 3, "completion_tokens": 2,
                "finish_reason": "length", "ttft_ms": 1.5, "error": None}


def test_only_v1_routes_need_the_key():
    assert needs_key("/v1/chat/completions") and needs_key("/v1/responses") and needs_key("/v1")
    for open_path in ("/", "/static/app.js", "/static/css/x.css", "/healthz", "/v1x", "/readyz"):
        assert not needs_key(open_path), open_path
    assert bearer_token(req(headers=[("Authorization", f"bearer {KEY}")])) == KEY
    assert bearer_token(req(headers=[("Authorization", f"Basic {KEY}")])) is None
    assert bearer_token(req(headers=[("Authorization", "Bearer ")])) is None


def test_api_key_refuses_with_401_and_never_echoes_the_key():
    inner = Echo()
    app = GatewayApp(inner, auth=ApiKeyCheck(KEY))
    for headers in ([], [("Authorization", "Bearer wrong-key")],
                    [("Authorization", f"Bearer {KEY}x")], [("Authorization", KEY)]):
        r = app.handle(req(path="/v1/responses", headers=headers))
        assert r.status == 401, headers
        doc = json.loads(r.body)["error"]
        assert doc["code"] == "invalid_api_key" and doc["type"] == "invalid_request_error"
        assert KEY not in r.body.decode() and "wrong-key" not in r.body.decode()
        assert dict(r.headers)["WWW-Authenticate"] == "Bearer"
        assert dict(r.headers)["X-Request-Id"]
    assert inner.seen == []                                    # refused before the app
    ok = app.handle(req(path="/v1/models", headers=[("Authorization", f"Bearer {KEY}")]))
    assert ok.status == 200
    # a page at / and its assets load without a key (the stand-in app answers them)
    assert app.handle(req(path="/")).status == 200
    assert app.handle(req(path="/static/app.js")).status == 200
    assert inner.seen == ["/v1/models", "/", "/static/app.js"]
    assert KEY not in repr(ApiKeyCheck(KEY))
    # no key configured: everything passes
    assert GatewayApp(Echo()).handle(req(path="/v1/models")).status == 200


def test_cors_off_by_default_preflight_and_headers_when_on():
    off = GatewayApp(Echo())
    r = off.handle(req(path="/v1/models", headers=[("Origin", "https://app.example")]))
    assert not any(k.startswith("Access-Control") for k, _ in r.headers)
    cors = CorsPolicy.parse("https://app.example, https://b.example/")
    app = GatewayApp(Echo(), auth=ApiKeyCheck(KEY), cors=cors)
    preflight = req("OPTIONS", "/v1/chat/completions", headers=[
        ("Origin", "https://b.example"), ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", "authorization, content-type")])
    r = app.handle(preflight)                    # answered without a key
    h = dict(r.headers)
    assert r.status == 204 and h["Access-Control-Allow-Origin"] == "https://b.example"
    assert "POST" in h["Access-Control-Allow-Methods"]
    assert h["Access-Control-Allow-Headers"] == "authorization, content-type"
    assert [k for k, _ in r.headers].count("Access-Control-Allow-Origin") == 1
    # an origin not on the list gets no CORS header
    r = app.handle(req("OPTIONS", "/v1/models", headers=[
        ("Origin", "https://evil.example"), ("Access-Control-Request-Method", "GET")]))
    assert "Access-Control-Allow-Origin" not in dict(r.headers)
    # actual responses, errors included, carry the headers
    r = app.handle(req(path="/v1/models", headers=[("Origin", "https://app.example")]))
    assert r.status == 401
    assert dict(r.headers)["Access-Control-Allow-Origin"] == "https://app.example"
    assert "X-Request-Id" in dict(r.headers)["Access-Control-Expose-Headers"]
    star = GatewayApp(Echo(), cors=CorsPolicy.parse("*"))
    stream = star.handle(req(path="/v1/stream", headers=[("Origin", "http://x")]))
    first = stream.poll(0.0)
    assert dict(first.head.headers)["Access-Control-Allow-Origin"] == "*"


def test_loading_app_answers_health_200_and_the_rest_503_retry_after():
    api, health = LoadingApp(API_ROUTES), LoadingApp(HEALTH_ROUTES)
    assert health.handle(req(path="/healthz")).status == 200
    assert api.handle(req(path="/healthz")).status == 200
    for app, path, method in ((health, "/readyz", "GET"), (health, "/metrics", "GET"),
                              (api, "/v1/chat/completions", "POST"), (api, "/v1/models", "GET")):
        r = app.handle(req(method, path))
        assert r.status == 503, path
        assert json.loads(r.body)["error"]["code"] == "model_loading"
        assert int(dict(r.headers)["Retry-After"]) >= 1
    assert api.handle(req(path="/nope")).status == 404


def test_access_log_one_json_line_per_request():
    lines = []
    clock = iter([10.0, 10.25, 20.0, 20.5, 20.5]).__next__
    access = AccessLog(lines.append, clock=clock, wall=lambda: 0.0)
    app = GatewayApp(Echo(), auth=ApiKeyCheck(KEY), access=access)
    app.handle(req("POST", "/v1/chat/completions", body=b'{"model":"m1"}'))
    rec = json.loads(lines[0])
    assert rec["status"] == 401 and rec["method"] == "POST"
    assert rec["path"] == "/v1/chat/completions" and rec["client"] == "10.0.0.7:5000"
    assert rec["error"] == "You didn't provide an API key. " \
                           "Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
    assert rec["model"] is None                 # refused unread: nobody parsed a model
    assert rec["duration_ms"] == 250.0 and rec["time"] == "1970-01-01T00:00:00.000Z"
    assert rec["request_id"].startswith("req-") and rec["bytes_sent"] > 0
    stream = app.handle(req("POST", "/v1/stream", headers=[("Authorization", f"Bearer {KEY}"),
                                                            ("X-Request-Id", "r-s")]))
    stream.poll(0.0)
    assert len(lines) == 1                                     # not before the last byte
    stream.poll(0.0)
    rec = json.loads(lines[1])
    assert rec == {**rec, "status": 200, "request_id": "r-s", "model": "succ",
                   "prompt_tokens": 3, "completion_tokens": 2, "finish_reason": "length",
                   "ttft_ms": 1.5, "duration_ms": 500.0, "error": None,
                   "bytes_sent": len(b"data: 1\n\n") + len(b"data: [DONE]\n\n")}
    stream.cancel()
    assert len(lines) == 2                                     # logged once


def test_a_logged_stream_has_output_when_its_inner_stream_has():
    access = AccessLog(None)
    inner = FakeStream()
    stream = LoggedStream(inner, access.begin(req()), access)
    assert stream.has_output()
    inner.polls.clear()
    assert not stream.has_output()


def test_access_log_cancelled_stream_and_off():
    lines = []
    access = AccessLog(lines.append, clock=lambda: 1.0)
    inner = FakeStream()
    stream = LoggedStream(inner, access.begin(req()), access)
    stream.cancel()
    assert inner.cancelled
    rec = json.loads(lines[0])
    assert rec["status"] == 499 and rec["error"].startswith("cancelled")
    quiet = AccessLog(None)
    entry = quiet.begin(req())
    quiet.write(entry, {})                                     # off: nothing, no error
    assert isinstance(entry, Entry)


def test_a_stream_that_raises_is_logged_once_with_its_request_id(caplog):
    import pytest
    from server.http.protocol import AppFailure

    class Broken(FakeStream):
        def poll(self, now_s):
            raise RuntimeError("boom")

    lines = []
    access = AccessLog(lines.append)
    entry = access.begin(replace(req(), request_id="req-abc"))
    stream = LoggedStream(Broken(), entry, access)
    with caplog.at_level("ERROR", logger="tlserve.app"), pytest.raises(AppFailure):
        stream.poll(0.0)
    failures = [r for r in caplog.records if "req-abc" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None
    assert json.loads(lines[0])["status"] == 500


def test_an_app_that_raises_is_a_500_logged_once_with_its_request_id(caplog):
    class Raises(Echo):
        def handle(self, request):
            raise RuntimeError("bug")

    lines = []
    app = GatewayApp(Raises(), access=AccessLog(lines.append))
    with caplog.at_level("ERROR", logger="tlserve.app"):
        r = app.handle(req(headers=[("X-Request-Id", "rid-500")]))
    assert r.status == 500 and dict(r.headers)["X-Request-Id"] == "rid-500"
    records = [rec for rec in caplog.records if "rid-500" in rec.getMessage()]
    assert len(records) == 1 and records[0].exc_info is not None
    rec = json.loads(lines[0])
    assert rec["status"] == 500 and rec["request_id"] == "rid-500"
    assert rec["error"] == "Internal server error."


def test_a_stream_that_is_not_logged_gets_the_recorded_fields_only():
    class Quiet:                        # a Stream with no `access_fields`: not `Logged`
        def __init__(self):
            self.polls = FakeStream().polls

        def poll(self, now_s):
            return self.polls.pop(0)

    lines = []
    access = AccessLog(lines.append, clock=lambda: 1.0)
    stream = LoggedStream(Quiet(), access.begin(req()), access)
    stream.poll(0.0)
    stream.poll(0.0)
    rec = json.loads(lines[0])
    assert rec["status"] == 200 and rec["bytes_sent"] == len(b"data: 1\n\n" b"data: [DONE]\n\n")
    assert rec["model"] is None and rec["prompt_tokens"] is None and rec["error"] is None


def test_every_stream_the_api_answers_with_is_logged():
    from server.api.embeddings import EmbedStream
    from server.offloop.pool import OffLoopStream, ResponseStream
    from server.api.streams import GenerationStream
    from server.http.protocol import Logged
    for stream_type in (GenerationStream, EmbedStream, OffLoopStream, ResponseStream):
        assert issubclass(stream_type, Logged), stream_type
    noted = ResponseStream(Response(status=404, notes=(("model", "m"), ("error", "no"))))
    assert noted.access_fields() == {"model": "m", "error": "no"}
