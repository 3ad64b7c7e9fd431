"""The request id, minted once at the front door and carried on the `Request`.

    client's X-Request-Id (printable ASCII, <= 128 chars)?  -> kept, echoed back
    otherwise                                               -> "req-<24 hex>"

`stamped(request)` is the one place an id is chosen: the gateway (API listener) and
`StampedApp` (health listener) call it first, and everything after reads
`request.request_id` (the X-Request-Id header, error logs, the access log, the trace).
"""
from __future__ import annotations

import os
import re
from dataclasses import replace

from server.http.protocol import App, Request, Response, Stream

MAX_REQUEST_ID_CHARS = 128                      # longer client ids are replaced, not echoed
REQUEST_ID_OK = re.compile(r"[\x21-\x7e]{1,%d}" % MAX_REQUEST_ID_CHARS)
MINTED_ID_BYTES = 12                            # 24 hex digits after "req-"


def request_id_for(request: Request) -> str:
    """The client's id when it is sane, else a fresh one."""
    given = request.header("x-request-id")
    if given and REQUEST_ID_OK.fullmatch(given):
        return given
    return f"req-{os.urandom(MINTED_ID_BYTES).hex()}"


def stamped(request: Request) -> Request:
    """The request carrying its id (an id already stamped is kept: one id per request)."""
    if request.request_id:
        return request
    return replace(request, request_id=request_id_for(request))


def id_header(request: Request) -> tuple[tuple[str, str], ...]:
    """The response header that names a stamped request."""
    return (("X-Request-Id", request.request_id),)


class StampedApp:
    """An App that stamps the id, then asks `inner` (a listener without a gateway)."""

    def __init__(self, inner: App):
        self.inner = inner

    def handle(self, request: Request) -> Response | Stream:
        return self.inner.handle(stamped(request))

    def error(self, kind: str, message: str, path: str = "") -> Response:
        return self.inner.error(kind, message, path)
