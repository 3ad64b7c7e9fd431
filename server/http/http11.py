"""Sans-IO HTTP/1.1, server side: received bytes in -> `Request` events; responses -> bytes.

This module contains no I/O whatsoever (the h11 design): `server/http/loop.py` owns the sockets
and feeds a `Connection` whatever `recv` returned; the `Connection` answers with events and
with the bytes to send. That makes every framing rule testable by feeding input split at
every byte offset.

One `Connection` serves one TCP connection for its whole life, one request at a time:

    IDLE --head parsed--> BODY --body complete--> HANDLING --send_response--------> IDLE
                                                           --send_head--> STREAMING --send_end--> IDLE
    (any state) --an error, or a response that ends the connection--> CLOSING

Pipelined requests stay in the input buffer while a response is produced: the next one is
parsed only once the current response is finished, so answers always leave in order
(RFC 9112 9.3.2). Errors never pass silently: for bad framing `next_event` returns an
`HttpError(kind, message)` event that names what went wrong and knows nothing of JSON or
statuses. The loop has the application render it (`App.error`, through the one table in
`server/errors.py`) and hands the `Response` to `send_error`, which ends the connection
(RFC 9112 9.6: a server that cannot parse a request cannot find the next one).

The request head's rules (request line, fields, Content-Length, Transfer-Encoding, Expect,
keep-alive) are pure functions in `server/http/head.py`; the body readers (none,
Content-Length, chunked) are one object per framing in `server/http/bodies.py`; this
module finds where a head ends, hands the body to the reader its head chose, and writes
responses.

What is deliberately out: trailers are parsed and dropped, transfer codings other than
`chunked` are 501, `Upgrade` is ignored, and a request's framing is the only thing checked
here (what a request means is the application's business).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus

from server.http.bodies import BodyReader, Framing, SinkReader, framing_of, reader_for
from server.http.head import Rejected, RequestHead, asks_close, interpret_head
from server.http.limits import HttpLimits
from server.http.protocol import (BodySink, BodySinks, Request, Response, ResponseHead,
                                  SpooledBody, StreamPoll)

_HEAD_END = re.compile(rb"\r?\n\r?\n")

CONTINUE_BYTES = b"HTTP/1.1 100 Continue\r\n\r\n"
# Headers whose framing meaning belongs to this module: the app's copies are dropped.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
_UNSAFE_FIELD = re.compile(r"[\r\n\x00]")      # would split a header line: never sent
# RFC 9110 15: the reason phrase of each status (an unknown code gets an empty phrase).
_REASONS = {status.value: status.phrase for status in HTTPStatus}


@dataclass(frozen=True)
class HttpError:
    """An event: a request this connection cannot accept. The application maps `kind`
    ("malformed_http", "body_too_large", ...) to a status and document (`App.error`)."""
    kind: str
    message: str
    path: str = ""          # the request's target path when its head was read, else ""


class ProtocolMisuse(RuntimeError):
    """The caller (the loop) called a method in the wrong state: a bug, never a client error."""


@dataclass(frozen=True)
class Interim:
    """An event: send these bytes now (the `100 Continue` an `Expect` asked for)."""
    data: bytes


class Wait(Enum):
    """`next_event`'s two ways of saying "no event now". They wait for different things:
    NEED_DATA for the socket to bring more bytes, PAUSED for the loop to finish sending the
    current answer (the next pipelined request waits in the buffer until then)."""
    NEED_DATA = "need_data"   # the request is not complete: read more bytes from the socket
    PAUSED = "paused"         # a request is being answered (or the connection is ending):
                              # nothing more is parsed until its response has been sent


NEED_DATA, PAUSED = Wait.NEED_DATA, Wait.PAUSED

IDLE, BODY, HANDLING, STREAMING, CLOSING = "IDLE", "BODY", "HANDLING", "STREAMING", "CLOSING"


class Connection:
    """The HTTP/1.1 state of one connection. Feed `receive_data`, pull `next_event`."""

    __slots__ = ("limits", "peer", "state", "_buf", "_scan_from", "_head", "_body_reader",
                 "_pending_path", "_sinks", "_sink", "_keep_alive", "_is_head_request", "_is_11",
                 "_is_chunked_out", "_out_left",
                 "_close_requested", "is_eof", "num_requests")

    def __init__(self, *, limits: HttpLimits = HttpLimits(), peer: str = "",
                 sinks: BodySinks | None = None):
        """`sinks`: which bodies go to a file as they arrive (an upload), not to memory."""
        self.limits = limits
        self._sinks = sinks
        self._sink: BodySink | None = None            # the current body's, when it has one
        self.peer = peer
        self.state = IDLE
        self._buf = bytearray()        # received, not yet consumed (del from the front is O(1))
        self._scan_from = 0            # where the search for the end of the head resumes
        self._head: RequestHead | None = None
        self._body_reader: BodyReader | None = None   # the current request's body, read
        self._pending_path = ""                 # its target path (errors choose a shape by it)
        self._keep_alive = True
        self._is_head_request = False
        self._is_11 = True
        self._is_chunked_out = False
        self._out_left: int | None = None
        self._close_requested = False
        self.is_eof = False
        self.num_requests = 0

    # ---- input ------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes from the socket; b"" means the peer closed its sending side."""
        if data:
            self._buf += data
        else:
            self.is_eof = True

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    @property
    def has_partial_request(self) -> bool:
        """A request has started arriving but is not complete (the timeouts care)."""
        return self.state == BODY or (self.state == IDLE and len(self._buf) > 0)

    @property
    def is_body_paused(self) -> bool:
        """The body goes to a sink whose pieces wait for the disk over its bound: read no
        more of it until the sinks' wake-up says the sink has room."""
        return self._sink is not None and not self._sink.has_room

    @property
    def pending_path(self) -> str:
        """The target path of the request being read, once its head is in ("" before)."""
        return self._pending_path

    def next_event(self) -> Request | Interim | HttpError | Wait:
        """The next complete request, an `Interim` to send, an `HttpError` for a request that
        can never be accepted (answer it with `send_error`), `NEED_DATA` (feed more bytes) or
        `PAUSED` (send the current response first)."""
        try:
            return self._next_event()
        except Rejected as exc:
            self.abandon()
            return HttpError(*exc.args, path=self.pending_path)

    def _next_event(self) -> Request | Interim | Wait:
        if self.state == IDLE:
            head = self._parse_head()
            if head is None:
                if self.is_eof and self._buf:
                    raise Rejected("malformed_http", "connection closed inside a request head")
                return NEED_DATA
            self._pending_path = head.target_path
            self._start_body(head)
            if (head.expects_continue and not self._buf
                    and framing_of(head) is not Framing.NONE):
                return Interim(CONTINUE_BYTES)
        if self.state == BODY:
            body = self._body_reader.read(self._buf)
            if body is None:
                if self.is_eof:
                    raise Rejected("malformed_http", "connection closed inside a request body")
                return NEED_DATA
            return self._finish_request(body)
        return PAUSED                       # HANDLING, STREAMING or CLOSING

    # ---- the head ---------------------------------------------------------------------

    def _parse_head(self) -> RequestHead | None:
        buf = self._buf
        while buf[:2] == b"\r\n" or buf[:1] == b"\n":   # RFC 9112 2.2: skip leading blank lines
            del buf[:2 if buf[:1] == b"\r" else 1]
        if not buf:
            return None
        match = _HEAD_END.search(buf, max(0, self._scan_from - 3))
        if match is None:
            self._scan_from = len(buf)
            if len(buf) > self.limits.max_header_bytes:
                raise Rejected("headers_too_large", "request header block too large")
            return None
        if match.end() > self.limits.max_header_bytes:
            raise Rejected("headers_too_large", "request header block too large")
        raw = bytes(buf[:match.start()])
        del buf[:match.end()]
        self._scan_from = 0
        return interpret_head(raw, self.limits)

    def _start_body(self, head: RequestHead) -> None:
        sink = (self._sinks.sink_for(head.method, head.target_path, head.headers)
                if self._sinks is not None and head.content_length and not head.is_chunked
                else None)
        limit = sink.max_bytes if sink is not None else self.limits.max_body_bytes
        if head.content_length is not None and head.content_length > limit:
            if sink is not None:
                sink.discard()
            raise Rejected("body_too_large", f"request body exceeds {limit} bytes")
        self._head = head
        self._sink = sink
        self._body_reader = (SinkReader(head, sink) if sink is not None
                             else reader_for(head, self.limits))
        self.state = BODY

    def abandon(self) -> None:
        """The body being read will never be whole (an error, the connection closing):
        its sink, if it has one, drops what it wrote. Safe to call at any time."""
        if self._sink is not None:
            sink, self._sink = self._sink, None
            sink.discard()

    def _finish_request(self, body: bytes) -> Request:
        head = self._head
        spooled: SpooledBody | None = self._sink.finish() if self._sink is not None else None
        self._head, self._body_reader, self._sink, self._pending_path = None, None, None, ""
        self._keep_alive = head.keep_alive and not self._close_requested
        self._is_head_request = head.method == "HEAD"
        self._is_11 = head.version == "HTTP/1.1"
        self.state = HANDLING
        self.num_requests += 1
        return Request(method=head.method, path=head.target_path, query=head.query,
                       headers=head.headers, body=body, version=head.version, peer=self.peer,
                       spooled=spooled)

    # ---- output -----------------------------------------------------------------------

    def request_close(self) -> None:
        """End the connection after the current (or next) response (draining, timeouts)."""
        self._close_requested = True
        if self.state in (IDLE, BODY, HANDLING):
            self._keep_alive = False

    def send_response(self, response: Response) -> bytes:
        """A whole response to the request just returned by next_event (Content-Length framed)."""
        self._expect_state(HANDLING, "send_response")
        if asks_close(response.headers):
            self._keep_alive = False
        body = b"" if self._is_head_request else response.body
        head = self._head_bytes(response.status, response.headers,
                                ("Content-Length", str(len(response.body))))
        self._end_cycle()
        return head + body

    def send_head(self, head: ResponseHead) -> bytes:
        """The head of a response whose body follows in send_data calls, then send_end."""
        self._expect_state(HANDLING, "send_head")
        if asks_close(head.headers):
            self._keep_alive = False
        self._out_left = head.content_length
        if head.content_length is not None:
            framing = ("Content-Length", str(head.content_length))
        elif self._is_head_request:
            framing = None
        elif self._is_11:
            framing = ("Transfer-Encoding", "chunked")     # RFC 9112 7.1
            self._is_chunked_out = True
        else:
            framing = None                                 # HTTP/1.0: the close ends the body
            self._keep_alive = False
        self.state = STREAMING
        return self._head_bytes(head.status, head.headers, framing)

    def send_data(self, data: bytes) -> bytes:
        self._expect_state(STREAMING, "send_data")
        if not data or self._is_head_request:
            return b""
        if self._out_left is not None:
            if len(data) > self._out_left:
                raise ProtocolMisuse("stream wrote more than its content_length")
            self._out_left -= len(data)
        if self._is_chunked_out:
            return b"%x\r\n%b\r\n" % (len(data), data)
        return bytes(data)

    def send_end(self) -> bytes:
        self._expect_state(STREAMING, "send_end")
        if self._out_left and not self._is_head_request:
            raise ProtocolMisuse("stream ended before its content_length")
        tail = b"0\r\n\r\n" if self._is_chunked_out else b""
        self._end_cycle()
        return tail

    def send_poll(self, poll: StreamPoll) -> bytes:
        """A stream's poll as bytes: its head once (the first poll that has one), the chunks,
        the end; body bytes before any head are the stream's bug (ProtocolMisuse)."""
        parts = [self.send_head(poll.head)] if poll.head and self.state == HANDLING else []
        parts.extend(self.send_data(chunk) for chunk in poll.chunks)
        if poll.done:
            parts.append(self.send_end())
        return b"".join(parts)

    def send_error(self, response: Response) -> bytes:
        """The rendered HttpError for a request that failed to parse; the connection ends."""
        if self.state not in (IDLE, BODY, HANDLING):
            raise ProtocolMisuse(f"send_error in state {self.state}")
        self.state = HANDLING
        self._keep_alive = False
        self._is_head_request = False
        return self.send_response(response)

    def _end_cycle(self) -> None:
        self._is_chunked_out = False
        self._out_left = None
        self.state = IDLE if self._keep_alive else CLOSING

    def _expect_state(self, state: str, what: str) -> None:
        if self.state != state:
            raise ProtocolMisuse(f"{what} in state {self.state}")

    def _head_bytes(self, status: int, headers, framing) -> bytes:
        """RFC 9112 4 and 5: status line, fields (the app's, then ours), blank line."""
        kept = [(name, value) for name, value in headers if name.lower() not in _FRAMING_HEADERS]
        if _UNSAFE_FIELD.search("".join(name + value for name, value in kept)):
            raise ProtocolMisuse("response header contains CR, LF or NUL")
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"]
        lines.extend(f"{name}: {value}\r\n" for name, value in kept)
        if framing is not None:
            lines.append(f"{framing[0]}: {framing[1]}\r\n")
        lines.append("Connection: keep-alive\r\n\r\n" if self._keep_alive
                     else "Connection: close\r\n\r\n")
        return "".join(lines).encode("latin-1", "replace")
