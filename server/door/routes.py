"""The route tables: (method, path pattern) -> handler name, for both listeners.

A table, not an if-chain: one line per route. `resolve` tells three outcomes apart, each in
the OpenAI error shape when it fails: a match, a known path with the wrong method (405 with
`Allow`), and an unknown path (404). Patterns are literal paths, or end in `{name}` to take
the rest of the path as one parameter (model ids may contain `/`).
"""
from __future__ import annotations

from dataclasses import dataclass

from server.replies import JSON_CONTENT_TYPE, json_bytes
from server.errors import ApiError
from server.http.protocol import Request, Response

Params = dict[str, str]                         # path parameters from the route table


@dataclass(frozen=True)
class Route:
    method: str
    pattern: str          # "/v1/models/{model}" or a literal path
    handler: str          # the name of the handler in the app's handler table

    def match(self, path: str) -> dict[str, str] | None:
        if "{" not in self.pattern:
            return {} if path == self.pattern else None
        prefix, _, rest = self.pattern.partition("{")
        if not path.startswith(prefix) or len(path) == len(prefix):
            return None
        return {rest.rstrip("}"): path[len(prefix):]}


API_ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/chat/completions", "chat"),
    Route("POST", "/v1/completions", "completions"),
    Route("POST", "/v1/responses", "responses"),        # stateless (server/api/responses/)
    Route("POST", "/v1/embeddings", "embeddings"),
    Route("POST", "/v1/rerank", "rerank"),              # bi-encoder scoring (server/api/rerank.py)
    Route("POST", "/v1/score", "score"),
    Route("POST", "/v1/tokenize", "tokenize"),
    Route("POST", "/v1/detokenize", "detokenize"),
    Route("GET", "/v1/models", "models"),
    Route("GET", "/v1/models/{model}", "model"),
    Route("GET", "/healthz", "healthz"),
    Route("GET", "/health", "healthz"),                 # the same, as vLLM and llm-d name it
    Route("GET", "/", "page"),                          # the chat page (server/observe/web/)
    Route("GET", "/static/{name}", "static"),
    Route("GET", "/favicon.ico", "favicon"),            # browsers ask for it unprompted
)

HEALTH_ROUTES: tuple[Route, ...] = (
    Route("GET", "/healthz", "healthz"),
    Route("GET", "/health", "healthz"),
    Route("GET", "/readyz", "readyz"),
    Route("GET", "/metrics", "metrics"),
    Route("GET", "/engine", "engine_page"),             # the engine view (server/observe/web/)
    Route("GET", "/engine/snapshot", "engine_snapshot"),
    Route("GET", "/static/{name}", "static"),
    Route("GET", "/favicon.ico", "favicon"),
)


def resolve(routes: tuple[Route, ...], method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The matching route and its path parameters, or ApiError 404 / 405."""
    allowed = []
    for route in routes:
        params = route.match(path)
        if params is None:
            continue
        if route.method == method:
            return route, params
        allowed.append(route.method)
    if allowed:
        raise ApiError("method_not_allowed",
                       f"Method {method} is not allowed for {path}; use {', '.join(allowed)}.",
                       headers=(("Allow", ", ".join(sorted(set(allowed)))),))
    raise ApiError("route_not_found", f"Unknown request URL: {method} {path}.")


def health_ok(request: Request, params: dict[str, str], extra: object) -> Response:
    """`/healthz` while the process lives: both listeners, loading or loaded, answer it."""
    return Response(status=200, headers=(JSON_CONTENT_TYPE,), body=json_bytes({"status": "ok"}))
