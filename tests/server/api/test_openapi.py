"""openapi.yaml stays true: every served route is documented, and every status the live
server answers for a route is listed for that operation."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests

from server.config import ServeConfig
from server.api.routes import API_ROUTES
from server.observe.health import HEALTH_ROUTES
from server.serve import spawn

OPENAPI = Path(__file__).resolve().parents[3] / "openapi.yaml"
GENERATION_ERRORS = {"400", "404", "422", "429", "500", "503"}


def documented() -> tuple[dict[tuple[str, str], set[str]], dict[str, int]]:
    """{(METHOD, path): {status, ...}} from the `paths:` block, and `x-route-errors`."""
    ops: dict[tuple[str, str], set[str]] = {}
    route_errors: dict[str, int] = {}
    section = path = method = None
    for line in OPENAPI.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        text = line.strip()
        if indent == 0:
            section = text.rstrip(":")
            continue
        if section == "x-route-errors" and indent == 2:
            key, _, value = text.partition(":")
            route_errors[key] = int(value)
        if section != "paths":
            continue
        if indent == 2:
            path = text.rstrip(":")
        elif indent == 4:
            method = text.rstrip(":").upper()
            ops[(method, path)] = set()
        elif indent == 8 and re.fullmatch(r"'\d{3}':", text):
            ops[(method, path)].add(text[1:4])
    return ops, route_errors


def test_every_route_is_documented_and_nothing_else():
    ops, route_errors = documented()
    served = {(r.method, r.pattern) for r in API_ROUTES + HEALTH_ROUTES}
    assert set(ops) == served
    assert route_errors == {"unknown_route": 404, "wrong_method": 405}
    for key in [("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
                ("POST", "/v1/responses")]:
        assert GENERATION_ERRORS <= ops[key], key
    assert all("200" in statuses for statuses in ops.values())


@pytest.fixture(scope="module")
def server(succ_model_dir):
    handle = spawn(ServeConfig.for_model(succ_model_dir))
    yield handle
    handle.stop()


def exercise(handle) -> list[tuple[str, str, str]]:
    """(METHOD, route pattern, status) for a spread of good and bad requests."""
    chat = {"model": "succ", "messages": [{"role": "user", "content": "a"}], "max_tokens": 2}
    cases = [
        ("POST", "/v1/chat/completions", "/v1/chat/completions", chat),
        ("POST", "/v1/chat/completions", "/v1/chat/completions", dict(chat, temperature=9)),
        ("POST", "/v1/chat/completions", "/v1/chat/completions", dict(chat, model="x")),
        ("POST", "/v1/chat/completions", "/v1/chat/completions", dict(chat, n=3)),
        ("POST", "/v1/completions", "/v1/completions", {"model": "succ", "prompt": "a"}),
        ("POST", "/v1/completions", "/v1/completions", {"model": "succ", "prompt": 1}),
        ("POST", "/v1/completions", "/v1/completions", {"model": "x", "prompt": "a"}),
        ("POST", "/v1/completions", "/v1/completions", {"model": "succ", "prompt": "a",
                                                        "echo": True}),
        ("POST", "/v1/responses", "/v1/responses", {"model": "succ", "input": "a",
                                                    "max_output_tokens": 2}),
        ("POST", "/v1/responses", "/v1/responses", {"model": "succ", "input": []}),
        ("POST", "/v1/responses", "/v1/responses", {"model": "x", "input": "a"}),
        ("POST", "/v1/responses", "/v1/responses", {"model": "succ", "input": "a",
                                                    "store": True}),
        ("POST", "/v1/embeddings", "/v1/embeddings", {"model": "succ", "input": "a"}),
        ("POST", "/v1/embeddings", "/v1/embeddings", {"model": "succ", "input": 3}),
        ("POST", "/v1/embeddings", "/v1/embeddings", {"model": "x", "input": "a"}),
        ("POST", "/v1/embeddings", "/v1/embeddings", {"model": "succ", "input": "a",
                                                      "dimensions": 8}),
        ("POST", "/v1/rerank", "/v1/rerank", {"model": "succ", "query": "a",
                                              "documents": ["b"]}),       # a chat model: 400
        ("POST", "/v1/rerank", "/v1/rerank", {"model": "x", "query": "a", "documents": ["b"]}),
        ("POST", "/v1/score", "/v1/score", {"model": "succ", "text_1": "a", "text_2": "b"}),
        ("POST", "/v1/score", "/v1/score", {"model": "x", "text_1": "a", "text_2": "b"}),
        ("POST", "/v1/tokenize", "/v1/tokenize", {"model": "succ", "prompt": "a"}),
        ("POST", "/v1/tokenize", "/v1/tokenize", {"model": "succ"}),
        ("POST", "/v1/tokenize", "/v1/tokenize", {"model": "x", "prompt": "a"}),
        ("POST", "/v1/detokenize", "/v1/detokenize", {"model": "succ", "tokens": [97]}),
        ("POST", "/v1/detokenize", "/v1/detokenize", {"model": "succ", "tokens": "a"}),
        ("POST", "/v1/detokenize", "/v1/detokenize", {"model": "x", "tokens": [97]}),
        ("POST", "/v1/messages", "/v1/messages", {"model": "succ", "max_tokens": 2,
                                                  "messages": [{"role": "user", "content": "a"}]}),
        ("POST", "/v1/messages", "/v1/messages", {"model": "succ", "messages": []}),
        ("POST", "/v1/messages", "/v1/messages", {"model": "x", "max_tokens": 2,
                                                  "messages": [{"role": "user", "content": "a"}]}),
        ("POST", "/v1/messages/count_tokens", "/v1/messages/count_tokens",
         {"model": "succ", "messages": [{"role": "user", "content": "a"}]}),
        ("POST", "/v1/messages/count_tokens", "/v1/messages/count_tokens",
         {"model": "x", "messages": [{"role": "user", "content": "a"}]}),
        ("GET", "/v1/models", "/v1/models", None),
        ("GET", "/v1/models/{model}", "/v1/models/succ", None),
        ("GET", "/v1/models/{model}", "/v1/models/x", None),
        ("GET", "/healthz", "/healthz", None),
        ("GET", "/health", "/health", None),
    ]
    seen = []
    for method, pattern, path, body in cases:
        r = requests.request(method, handle.http_url + path, timeout=30,
                             data=None if body is None else json.dumps(body))
        seen.append((method, pattern, str(r.status_code)))
    for path in ("/healthz", "/health", "/readyz", "/metrics"):
        seen.append(("GET", path, str(requests.get(handle.health_url + path,
                                                   timeout=30).status_code)))
    return seen


def test_live_statuses_are_documented(server):
    ops, route_errors = documented()
    seen = exercise(server)
    for method, pattern, status in seen:
        assert status in ops[(method, pattern)], (method, pattern, status)
    assert {s for _, _, s in seen} >= {"200", "400", "404", "422"}
    assert requests.get(server.http_url + "/nope", timeout=30).status_code == \
        route_errors["unknown_route"]
    assert requests.delete(server.http_url + "/v1/models", timeout=30).status_code == \
        route_errors["wrong_method"]
    server.state.is_draining = True     # what on_drain sets: 503 on API routes and /readyz
    r = requests.get(server.health_url + "/readyz", timeout=30)
    assert r.status_code == 503 and "503" in ops[("GET", "/readyz")]
    r = requests.get(server.http_url + "/v1/models", timeout=30)
    assert r.status_code == 503 and "503" in ops[("GET", "/v1/models")]
    assert r.json()["error"]["code"] == "server_shutting_down"
    assert requests.get(server.http_url + "/healthz", timeout=30).status_code == 200
    for url in (server.http_url, server.health_url):        # liveness, not readiness
        assert requests.get(url + "/health", timeout=30).status_code == 200


def test_auth_and_loading_statuses_are_documented(succ_model_dir):
    """Every /v1 route answers 401 without the key (documented); while loading, every route
    but /healthz answers a documented 503."""
    from server.door.gateway import LoadingApp
    from server.door.routes import LIVENESS
    from server.http.protocol import Request
    from server.errors import ErrorShape
    ops, _ = documented()
    handle = spawn(ServeConfig.for_model(succ_model_dir, api_key="k-123"))
    try:
        for route in API_ROUTES:
            path = route.pattern.replace("{model}", "succ").replace("{name}", "chat.js").replace("{file_id}", "f").replace("{batch_id}", "b")
            r = requests.request(route.method, handle.http_url + path, timeout=30, data="{}")
            expected = "401" if path.startswith("/v1") else "200"
            assert str(r.status_code) == expected, route
            assert expected in ops[(route.method, route.pattern)], route
    finally:
        handle.stop()
    for routes in (API_ROUTES, HEALTH_ROUTES):
        app = LoadingApp(routes)
        for route in routes:
            path = route.pattern.replace("{model}", "succ").replace("{name}", "chat.js").replace("{file_id}", "f").replace("{batch_id}", "b")
            status = str(app.handle(Request(method=route.method, path=path)).status)
            busy = "529" if ErrorShape.for_path(path) is ErrorShape.ANTHROPIC else "503"
            assert status == ("200" if route.name == LIVENESS else busy), route
            assert status in ops[(route.method, route.pattern)], route


def test_the_document_is_valid_yaml_with_every_route_and_status():
    """A real YAML parser reads it too (a stray ': ' in a plain scalar once broke it)."""
    import yaml
    document = yaml.safe_load(OPENAPI.read_text(encoding="utf-8"))
    ops, _ = documented()
    parsed = {(method.upper(), path) for path, item in document["paths"].items()
              for method in item if method in ("get", "post", "delete", "options")}
    assert set(ops) <= parsed
