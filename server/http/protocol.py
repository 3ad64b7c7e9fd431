"""The seam between the socket loop (`server/http/loop.py`) and the application (routes, OpenAI).

The loop owns sockets and HTTP bytes; the application owns meaning. They meet in four
values and one protocol:

* `Request`  — one parsed HTTP request, body complete (in memory, or, for the requests a
  `BodySinks` claims -- an upload -- written to a file as it arrived: `SpooledBody`);
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

import threading
from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

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
    spooled: "SpooledBody | None" = None         # the body, when a sink took it (body is b"")

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


class Landing:
    """When a spooled body's last piece is on disk. The thread that writes the pieces sets
    it (with the OSError that stopped it, if one did); the request's handler waits for it
    before it reads the file."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.error: OSError | None = None

    def set(self, error: OSError | None = None) -> None:
        self.error = error
        self._done.set()

    def wait(self) -> OSError | None:
        """Block until the file is whole (or given up on): the error, or None."""
        self._done.wait()
        return self.error


@dataclass(frozen=True)
class SpooledBody:
    """A request body a `BodySink` wrote to a file as it arrived; whoever handles the
    request waits for its `landing`, then owns the file (moves it, or deletes it)."""
    path: str
    size_bytes: int
    landing: Landing


class BodySink(Protocol):
    """Where one request's body goes instead of memory. The HTTP parser calls `write` with
    each piece as it arrives (a recv's worth at most), then `finish` once the body is whole,
    or `discard` if it never will be (an error, the client gone). None of them may block:
    they run on the loop thread, so the writing happens elsewhere."""
    max_bytes: int                                # this body's own limit (above the usual)

    @property
    def has_room(self) -> bool:
        """False while the pieces given wait for the disk over the sink's bound: the loop
        reads no more of this body until the sinks' wake-up says there is room again."""
        ...

    def write(self, data: bytes) -> None: ...

    def finish(self) -> SpooledBody: ...

    def discard(self) -> None: ...


class BodySinks(Protocol):
    """Which requests' bodies go to a sink: asked once per request, at its head (method,
    path, headers as `Request` has them); None keeps the body in memory as usual. The loop
    that serves them calls `attach` once with its `wake` (called, from any thread, when a
    full sink has room again) and `close` when it stops (whatever was given still lands)."""

    def sink_for(self, method: str, path: str,
                 headers: tuple[tuple[str, str], ...]) -> BodySink | None: ...

    def attach(self, wake: Callable[[], None]) -> None: ...

    def close(self) -> None: ...


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
