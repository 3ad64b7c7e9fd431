"""The API's route table (server/api/routes.py) as the app reads it: 404 / 405 with `Allow`,
each request counted under its row's name, the rows marked off the loop prepared on the
pool, and a handler's outcome matched by its declared type (a Response or a Stream)."""
from __future__ import annotations

import json

import pytest

from server.api import app as app_module
from server.api.app import ApiApp
from server.api.chat.request import CHAT, chat
from server.api.completions import COMPLETIONS, completions
from server.offloop.pool import Inline, OffLoopStream
from server.api.responses import RESPONSES, responses
from server.api.routes import API_ROUTES
from server.door.routes import Route
from server.http.protocol import Request, Response
from server.state import ServerState

# The heavy, pure routes: they parse, template, tokenize or compile, so never on the loop.
HEAVY = {"chat", "completions", "responses", "embeddings", "tokenize", "rerank", "score", "messages",
         "count_tokens", "load_lora_adapter",    # reads and fits an adapter folder
         # ... or write or read the Batch API's files (an fsync never on the loop)
         "file_upload", "file_content", "file_delete", "batch_create", "batch_cancel"}


class CountingOffLoop(Inline):
    """The pool's stand-in: runs the work at once, remembering that it was handed over."""

    def __init__(self):
        self.runs = 0

    def run(self, work, then):
        self.runs += 1
        return super().run(work, then)


def bare_app(offloop=None) -> ApiApp:
    """The app of a server with no chat model (no engine needed to route)."""
    return ApiApp(chats={}, state=ServerState(), ping_interval_s=15.0,
                  offloop=offloop or Inline())


def answer(result):
    """A Response, or the one poll of a stream that stood for a whole answer."""
    if isinstance(result, Response):
        return result.status, dict(result.headers), result.body
    out = result.poll(0.0)
    return out.head.status, dict(out.head.headers), b"".join(out.chunks)


def test_a_known_path_with_another_method_is_405_with_allow_and_an_unknown_one_404():
    app = bare_app()
    for method, path, allow in (("DELETE", "/v1/models", "GET"),
                                ("GET", "/v1/chat/completions", "POST"),
                                ("POST", "/static/chat.js", "GET")):
        status, headers, body = answer(app.handle(Request(method=method, path=path)))
        assert status == 405 and headers["Allow"] == allow, (method, path)
        assert json.loads(body)["error"]["type"] == "invalid_request_error"
    status, _, body = answer(app.handle(Request(method="GET", path="/v1/nope")))
    assert status == 404
    assert json.loads(body)["error"]["message"] == "Unknown request URL: GET /v1/nope."
    assert app.state.metrics.requests == {("unmatched", 405, ""): 3, ("unmatched", 404, ""): 1}


def test_each_request_is_counted_under_its_routes_name():
    app = bare_app()
    for path in ("/v1/models", "/health", "/healthz", "/favicon.ico", "/"):
        assert answer(app.handle(Request(method="GET", path=path)))[0] == 200, path
    assert app.state.metrics.requests == {("models", 200, ""): 1, ("healthz", 200, ""): 2,
                                          ("favicon", 200, ""): 1, ("page", 200, ""): 1}


def test_the_generation_streams_count_under_the_name_of_their_row():
    """A generation's stream counts its own status under `Endpoint.route`: the same label
    as its row, so one route never has two names in /metrics."""
    names = {row.handler: row.name for row in API_ROUTES}
    assert names[chat] == CHAT.route and names[completions] == COMPLETIONS.route
    assert names[responses] == RESPONSES.route


@pytest.mark.parametrize("route", API_ROUTES, ids=lambda r: f"{r.method} {r.pattern}")
def test_only_the_heavy_routes_are_prepared_off_the_loop(route):
    offloop = CountingOffLoop()
    path = route.pattern.replace("{model}", "m").replace("{name}", "chat.js")
    result = bare_app(offloop).handle(Request(method=route.method, path=path, body=b"{}"))
    heavy = route.name in HEAVY
    assert offloop.runs == (1 if heavy else 0)
    assert isinstance(result, OffLoopStream) == heavy


def one_route_app(monkeypatch, handler) -> ApiApp:
    monkeypatch.setattr(app_module, "API_ROUTES", (Route("POST", "/v1/x", "x", handler),))
    return bare_app()


def test_a_stream_a_handler_returns_is_the_answer_as_it_is(monkeypatch):
    """The handler started its work (a generation is admitted where the handler runs): its
    stream is sent as it is, with nothing of the app's wrapped around it."""
    stream = Inline().run(lambda: Response(status=201), lambda outcome: outcome.get())
    app = one_route_app(monkeypatch, lambda ctx, request, params, extra: stream)
    assert app.handle(Request(method="POST", path="/v1/x")) is stream


def test_a_handler_outcome_of_no_declared_type_is_a_logged_500_never_called(monkeypatch,
                                                                              caplog):
    """A callable is neither a Response nor a Stream: the app matches declared types."""
    called = []
    app = one_route_app(monkeypatch, lambda ctx, request, params, extra:
                        lambda: called.append(1))
    with caplog.at_level("ERROR", logger="tlserve.app"):
        status, _, body = answer(app.handle(Request(method="POST", path="/v1/x",
                                                    request_id="rid-x")))
    assert status == 500 and json.loads(body)["error"]["code"] == "internal_error"
    assert called == [] and app.state.metrics.requests == {("x", 500, ""): 1}
    [record] = [r for r in caplog.records if "rid-x" in r.getMessage()]
    assert "neither a Response nor a Stream" in str(record.exc_info[1])


def test_a_task_names_the_paths_of_its_rows():
    """The refusal of a model that cannot do a task names that task's paths, read from the
    route table (a renamed row would change them)."""
    from server.api.launch import TASK_EMBED, TASK_GENERATE, TASK_TOKENIZE
    from server.api.routes import task_paths
    paths = task_paths()
    assert paths[TASK_GENERATE] == ("/v1/chat/completions, /v1/completions, /v1/responses "
                                    "and /v1/messages")
    assert paths[TASK_TOKENIZE] == "/v1/tokenize and /v1/detokenize"
    assert paths[TASK_EMBED] == "/v1/embeddings"
