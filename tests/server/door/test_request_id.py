"""The request id: minted once at the door, then read from the request everywhere."""
from __future__ import annotations

import json

from server.door.access import AccessLog
from server.door.gateway import GatewayApp
from server.door.request_id import (MAX_REQUEST_ID_CHARS, StampedApp, id_header,
                                    request_id_for, stamped)
from server.http.protocol import Request, Response, ResponseHead, StreamPoll


def req(headers=(), path="/v1/models", body=b""):
    return Request(method="POST", path=path, body=body,
                   headers=tuple((k.lower(), v) for k, v in headers))


class Recorder:
    """An inner app that keeps the requests it saw and answers what it is told."""

    def __init__(self, answer):
        self.seen, self.answer = [], answer

    def handle(self, request):
        self.seen.append(request)
        return self.answer(request)

    def error(self, kind, message, path=""):
        raise AssertionError("not used")


def test_a_sane_client_id_is_kept_and_anything_else_replaced():
    assert request_id_for(req([("X-Request-Id", "trace-1")])) == "trace-1"
    for bad in ("", "has space", "x" * (MAX_REQUEST_ID_CHARS + 1), "caf\u00e9"):
        minted = request_id_for(req([("X-Request-Id", bad)]))
        assert minted.startswith("req-") and len(minted) == len("req-") + 24
    assert request_id_for(req()) != request_id_for(req())          # fresh each time


def test_stamping_twice_keeps_the_first_id():
    once = stamped(req())
    assert once.request_id.startswith("req-") and stamped(once) is once


def test_the_id_the_app_sees_is_the_id_of_the_access_line():
    lines = []
    inner = Recorder(lambda r: Response(status=200, headers=id_header(r)))
    answer = GatewayApp(inner, access=AccessLog(lines.append)).handle(req())
    rid = inner.seen[0].request_id
    assert rid.startswith("req-") and dict(answer.headers)["X-Request-Id"] == rid
    assert json.loads(lines[0])["request_id"] == rid


def test_the_access_line_takes_model_and_error_from_notes_not_from_bodies():
    """A body that is not JSON (and a request body naming another model) changes nothing:
    the line holds what the application noted."""
    lines = []
    inner = Recorder(lambda r: Response(status=502, body=b"<html>upstream</html>",
                                        notes=(("model", "noted-model"), ("error", "noted"))))
    GatewayApp(inner, access=AccessLog(lines.append)).handle(
        req(body=b'{"model": "body-model"}'))
    line = json.loads(lines[0])
    assert line["model"] == "noted-model" and line["error"] == "noted"


def test_a_stream_line_carries_the_request_id_without_reading_its_head():
    class Stream:
        def poll(self, now_s):
            return StreamPoll(head=ResponseHead(status=200), chunks=[b"x"], done=True)

        def has_output(self):
            return True

        def next_deadline_s(self):
            return None

        def cancel(self):
            pass

    lines = []
    app = GatewayApp(Recorder(lambda r: Stream()), access=AccessLog(lines.append))
    app.handle(req([("X-Request-Id", "rid-s")])).poll(0.0)
    assert json.loads(lines[0])["request_id"] == "rid-s"


def test_the_health_listener_stamps_before_its_app():
    inner = Recorder(lambda r: Response(status=200, headers=id_header(r)))
    answer = StampedApp(inner).handle(req([("X-Request-Id", "probe-1")], path="/healthz"))
    assert inner.seen[0].request_id == "probe-1"
    assert dict(answer.headers)["X-Request-Id"] == "probe-1"
