"""The seam between the socket loop (`server/http/loop.py`) and the application (routes, OpenAI).

The loop owns sockets and HTTP bytes; the application owns meaning. They meet in four
values and one protocol:

* `Request`  — one parsed HTTP request, body complete;
* `Response` — a whole answer, known at once (the loop frames it with Content-Length);
* `Stream`   — an answer produced over time (a generation): when the engine thread wakes the
  loop, the loop polls it if it says it has output (`has_output`); it polls it too at the
  deadline the stream asks for (pings, queue timeouts), and calls `cancel()` as soon as
  the client goes away;
* `StreamPoll` / `ResponseHead` — what a poll found ready; a stream that only stood in
  for an answer still being prepared (server/offloop/pool.py) names, once it is ready, the
  stream to poll from then on (`successor`), so the holder polls the answer itself.

An `App` turns a `Request` into a `Response` or a `Stream`, and renders the errors the
transport finds. Nothing here does I/O or knows JSON.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

@dataclass(frozen=True, kw_only=True)
class Request:
    method: str                                  # "GET", "POST", ...
    path: str                                    # "/v1/models" (no query)
    query: str = ""                              # raw query string after '?', may be ""
    headers: tuple[tuple[str, str], ...] = ()    # (lower-cased name, value), in arrival order
    body: bytes = b""
    version: str = "HTTP/1.1"                    # "HTTP/1.1" or "HTTP/1.0"
    peer: str = ""                               # "host:port" of the client
    request_id: str = ""                         # stamped once at the front door (server/door/)

    def header(self, name: str, default: str | None = None) -> str | None:
        """The first value of a header (name case-insensitive)."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return default


@dataclass(frozen=True, kw_only=True)
class Response:
    status: int
    headers: tuple[tuple[str, str], ...] = ()    # the loop adds Content-Length and Connection
    body: bytes = b""
    # What the application records about this answer for the access log, never sent:
    # ("error", message) on an error answer (server/errors.py), ("model", id) when known.
    notes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class ResponseHead:
    status: int
    headers: tuple[tuple[str, str], ...] = ()
    content_length: int | None = None            # None: body of unknown length (chunked on 1.1)


@dataclass(kw_only=True)
class StreamPoll:
    head: ResponseHead | None = None             # given exactly once, on or before the first body bytes
    chunks: list[bytes] = field(default_factory=list)   # body bytes ready now, in order
    done: bool = False                           # no more chunks will come
    # A stand-in's answer, ready: whoever holds the stand-in may poll this one from now on
    # (this poll already carries its first output). Ignoring it is correct too: the
    # stand-in keeps passing polls on.
    successor: "Stream | None" = None


class AppFailure(Exception):
    """Raised by an App or a Stream that has already logged its own failure (with its request
    id and traceback): the transport answers or closes as for any exception, logging nothing."""


@runtime_checkable
class Stream(Protocol):
    """An answer produced over time. Every method is called on the loop thread only."""

    def poll(self, now_s: float) -> StreamPoll:
        """Non-blocking: return what is ready now (possibly nothing)."""

    def has_output(self) -> bool:
        """Poll me on a wake: I have bytes or an end to hand over. False lets a wake skip
        this stream (its deadline still polls it); True when unsure costs one idle poll."""

    def next_deadline_s(self) -> float | None:
        """Monotonic time at which the loop must poll again even without a wake, or None."""

    def cancel(self) -> None:
        """The client went away (or the server is stopping): abort the work behind this stream."""


class App(Protocol):
    def handle(self, request: Request) -> Response | Stream:
        """Answer one request. Must not block: long work becomes a `Stream`."""

    def error(self, kind: str, message: str, path: str = "") -> Response:
        """Render an error the transport found: an `HttpError` kind ("malformed_http",
        "body_too_large", ...) or "internal_error" when `handle` or a stream raised; `path`
        is the request's when its head was read ("" else). The application owns the
        document and the status; the transport only sends it."""


@runtime_checkable
class Logged(Protocol):
    """A stream that reports what its access line records of it, once it has ended (the
    front door's access log reads it: server/door/access.py)."""

    def access_fields(self) -> dict:
        """Some of the line's fields (`model`, `prompt_tokens`, `error` ...) by name."""
