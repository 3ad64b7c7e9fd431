"""The access log: one JSON line per API request, written when its last byte is handed over.

    {"time": "2026-11-30T15:00:01.123Z", "request_id": "req-…", "client": "127.0.0.1:50412",
     "method": "POST", "path": "/v1/chat/completions", "status": 200, "model": "smol-135m",
     "prompt_tokens": 12, "completion_tokens": 40, "finish_reason": "stop",
     "ttft_ms": 35.2, "duration_ms": 812.4, "bytes_sent": 5120, "error": null}

`time` is when the request reached the application (UTC); `duration_ms` runs from then to
the last body byte; `bytes_sent` counts body bytes (before chunked framing); `ttft_ms` is
the first generated token's delay. A field that does not apply is null. `error` holds the
message of an error answer (status >= 400, or an SSE error event after a 200 head); a
stream cut by the client (or a stop) is logged with `"status": 499` when no head was sent.

Every value comes from what the door and the application recorded, never from re-reading
bodies or headers: `request_id` from the stamped `Request` (server/door/request_id.py); a
whole `Response`'s `notes` (the error message `server/errors.py` noted, the model when the
app knew it); a `Logged` stream's `access_fields() -> dict` (model, tokens, finish reason,
TTFT, error): `GenerationStream` and `EmbedStream` are `Logged`, and so is the stream that
stands for work off the loop (server/offloop/pool.py), with the fields of the answer it
became: a whole answer's line reads as that Response's would. A stream that is not `Logged`
gets the line's recorded fields only.

A stream that raises is logged once, here, with its request id and traceback, then reported
to the transport as `AppFailure` (which closes the connection without logging it again).
"""
from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Callable

from server.http.protocol import AppFailure, Logged, Request, Response, Stream, StreamPoll

log = logging.getLogger("tlserve.access")
errors_log = logging.getLogger("tlserve.app")

STATUS_CLIENT_GONE = 499                    # nginx's code: the client closed first
ACCESS_LOGGER = "tlserve.access"


def open_access_log(target: str) -> Callable[[str], None] | None:
    """`access_log` -> a function that writes one line, or None for "off"."""
    if target == "off":
        return None
    logger = logging.getLogger(ACCESS_LOGGER)
    logger.setLevel(logging.INFO)
    logger.propagate = False                # JSON lines only: no other log format mixed in
    for old in list(logger.handlers):
        logger.removeHandler(old)
    handler = (logging.StreamHandler(sys.stdout if target == "stdout" else sys.stderr)
               if target in ("stdout", "stderr") else logging.FileHandler(target))
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    return logger.info


def _utc_iso(epoch_s: float) -> str:
    millis = int(epoch_s * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s)) + f".{millis:03d}Z"


@dataclass
class Entry:
    """One request's line, filled in as the answer goes out."""
    started_wall_s: float
    started_s: float
    request: Request
    status: int | None = None
    bytes_sent: int = 0

    @property
    def request_id(self) -> str | None:
        return self.request.request_id or None

    def line(self, now_s: float, fields: dict) -> str:
        r = self.request
        document = {
            "time": _utc_iso(self.started_wall_s), "request_id": self.request_id,
            "client": r.peer or None, "method": r.method, "path": r.path,
            "status": self.status, "model": None, "prompt_tokens": None,
            "completion_tokens": None, "finish_reason": None, "ttft_ms": None,
            "duration_ms": round((now_s - self.started_s) * 1000, 1),
            "bytes_sent": self.bytes_sent, "error": None}
        document.update(fields)
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


class AccessLog:
    """Makes `Entry`s and writes their lines through `emit` (None: the log is off)."""

    def __init__(self, emit: Callable[[str], None] | None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time):
        self.emit, self.clock, self.wall = emit, clock, wall

    def begin(self, request: Request) -> Entry:
        return Entry(started_wall_s=self.wall(), started_s=self.clock(), request=request)

    def response(self, entry: Entry, response: Response) -> None:
        entry.status = response.status
        entry.bytes_sent = len(response.body)
        self.write(entry, dict(response.notes))

    def write(self, entry: Entry, fields: dict) -> None:
        if self.emit is not None:
            self.emit(entry.line(self.clock(), fields))


class LoggedStream:
    """A `Stream` that counts what it sends and writes the access line when it ends."""

    def __init__(self, inner: Stream, entry: Entry, access: AccessLog,
                 extra_headers: tuple[tuple[str, str], ...] = ()):
        self.inner, self.entry, self.access = inner, entry, access
        self.extra_headers = extra_headers      # CORS headers for the head
        self.is_logged = False

    def poll(self, now_s: float) -> StreamPoll:
        try:
            out = self.inner.poll(now_s)
            if out.successor is not None:        # a stand-in's answer: poll it from now on
                self.inner, out.successor = out.successor, None
        except Exception as exc:
            errors_log.exception("request %s: stream failed", self.entry.request_id or "?")
            self._log({"error": "internal error (logged with the traceback)"},
                      status=self.entry.status or 500)
            raise AppFailure(str(exc)) from exc
        if out.head is not None:
            head = out.head
            self.entry.status = head.status
            if self.extra_headers:
                out.head = type(head)(status=head.status, content_length=head.content_length,
                                      headers=head.headers + self.extra_headers)
        self.entry.bytes_sent += sum(len(c) for c in out.chunks)
        if out.done:
            self._log({})
        return out

    def has_output(self) -> bool:
        return self.inner.has_output()

    def next_deadline_s(self) -> float | None:
        return self.inner.next_deadline_s()

    def cancel(self) -> None:
        self.inner.cancel()
        if not self.is_logged:
            self._log({"error": "cancelled: the client went away or the server stopped"},
                      status=self.entry.status or STATUS_CLIENT_GONE)

    def _log(self, extra: dict, status: int | None = None) -> None:
        if self.is_logged:
            return
        self.is_logged = True
        if status is not None:
            self.entry.status = status
        fields = dict(self.inner.access_fields()) if isinstance(self.inner, Logged) else {}
        if extra.get("error") or not fields.get("error"):
            fields.update(extra)
        self.access.write(self.entry, fields)
