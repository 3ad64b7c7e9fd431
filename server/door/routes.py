"""The router: a route row's shape and `resolve`, which both listeners' tables are read with.

The tables themselves stand beside the applications that answer them: the OpenAI listener's
in server/api/routes.py, the health listener's in server/observe/health.py. A row names a
method, a path pattern, the route's name (the metrics' `route` label) and its handler;
serve.py hands each table to the door's `LoadingApp` too, so the door answers from the same
rows before the models are loaded. Patterns are literal paths, or end in `{name}` to take
the rest of the path as one parameter (model ids may contain `/`).

`resolve` tells three outcomes apart, each in the OpenAI error shape when it fails: a match,
a known path with the wrong method (405 with `Allow`), and an unknown path (404).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Generic, Sequence, TypeVar

from server.replies import JSON_CONTENT_TYPE, json_bytes
from server.errors import ApiError
from server.http.protocol import Response

Params = dict[str, str]                         # path parameters from the route table
H = TypeVar("H")                                # what a listener's handlers are

# The liveness route: answered 200 by both listeners while the process lives, loading
# or loaded, and during a drain.
LIVENESS = "healthz"


@dataclass(frozen=True)
class Route(Generic[H]):
    method: str
    pattern: str          # "/v1/models/{model}" or a literal path
    name: str             # the route's name: its metrics label, one per handler
    handler: H            # what answers it (its listener's table says of which type)
    off_loop: bool = False    # prepared on an off-loop worker (server/offloop/pool.py)

    def match(self, path: str) -> Params | None:
        """The pattern's parameters in `path`: a `{name}` in the middle is one path
        segment, a `{name}` at the end the rest of the path (a model id may hold "/")."""
        if "{" not in self.pattern:
            return {} if path == self.pattern else None
        params: Params = {}
        rest = path
        for literal, name in _PLACEHOLDER.findall(self.pattern + "{}"):
            if not rest.startswith(literal):
                return None
            rest = rest[len(literal):]
            if not name:                       # the end of the pattern
                return params if rest == "" else None
            is_last = self.pattern.endswith("{" + name + "}")
            value, sep, tail = (rest, "", "") if is_last else rest.partition("/")
            if not value:
                return None
            params[name] = value
            rest = sep + tail
        return params


_PLACEHOLDER = re.compile(r"([^{]*)\{([a-z_]*)\}")


def resolve(routes: Sequence[Route[H]], method: str, path: str) -> tuple[Route[H], Params]:
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


def health_ok() -> Response:
    """`/healthz` while the process lives: both listeners, loading or loaded, answer it."""
    return Response(status=200, headers=(JSON_CONTENT_TYPE,), body=json_bytes({"status": "ok"}))
