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
keep-alive) are pure functions in `server/http/head.py`; this module finds where a head
ends, reads bodies (Content-Length or chunked) and writes responses.

What is deliberately out: trailers are parsed and dropped, transfer codings other than
`chunked` are 501, `Upgrade` is ignored, and a request's framing is the only thing checked
here (what a request means is the application's business).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus

from server.http.head import FIELD_LINE, Rejected, RequestHead, asks_close, interpret_head
from server.http.limits import HttpLimits
from server.http.protocol import Request, Response, ResponseHead, StreamPoll

# RFC 9112 7.1: chunk-size = 1*HEXDIG, then optional BWS and extensions after ';'.
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;.*)?")
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


class ProtocolMisuse(RuntimeError):
    """The caller (the loop) called a method in the wrong state: a bug, never a client error."""


@dataclass(frozen=True)
class Interim:
    """An event: send these bytes now (the `100 Continue` an `Expect` asked for)."""
    data: bytes


IDLE, BODY, HANDLING, STREAMING, CLOSING = "IDLE", "BODY", "HANDLING", "STREAMING", "CLOSING"


class Connection:
    """The HTTP/1.1 state of one connection. Feed `receive_data`, pull `next_event`."""

    __slots__ = ("limits", "peer", "state", "_buf", "_scan_from", "_head", "_body",
                 "_chunk_left", "_chunk_phase", "_trailer_bytes", "_keep_alive",
                 "_is_head_request", "_is_11", "_is_chunked_out", "_out_left", "_close_requested",
                 "is_eof", "num_requests")

    def __init__(self, *, limits: HttpLimits = HttpLimits(), peer: str = ""):
        self.limits = limits
        self.peer = peer
        self.state = IDLE
        self._buf = bytearray()        # received, not yet consumed (del from the front is O(1))
        self._scan_from = 0            # where the search for the end of the head resumes
        self._head: RequestHead | None = None
        self._body = bytearray()
        self._chunk_left = 0           # data bytes left in the current chunk
        self._chunk_phase = "size"     # "size" | "data" | "crlf" | "trailers"
        self._trailer_bytes = 0
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

    def next_event(self) -> Request | Interim | HttpError | None:
        """The next complete request, an `Interim` to send, an `HttpError` for a request that
        can never be accepted (answer it with `send_error`), or None (need more bytes / busy)."""
        try:
            return self._next_event()
        except Rejected as exc:
            return HttpError(*exc.args)

    def _next_event(self) -> Request | Interim | None:
        if self.state == IDLE:
            head = self._parse_head()
            if head is None:
                if self.is_eof and self._buf:
                    raise Rejected("malformed_http", "connection closed inside a request head")
                return None
            self._start_body(head)
            if head.expects_continue and not self._buf and self._body_expected(head):
                return Interim(CONTINUE_BYTES)
        if self.state == BODY:
            body = self._read_body()
            if body is None:
                if self.is_eof:
                    raise Rejected("malformed_http", "connection closed inside a request body")
                return None
            return self._finish_request(body)
        return None

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
        limit = self.limits.max_body_bytes
        if head.content_length is not None and head.content_length > limit:
            raise Rejected("body_too_large", f"request body exceeds {limit} bytes")
        self._head = head
        self._body = bytearray()
        self._chunk_phase, self._chunk_left, self._trailer_bytes = "size", 0, 0
        self.state = BODY

    @staticmethod
    def _body_expected(head: RequestHead) -> bool:
        return head.is_chunked or bool(head.content_length)

    # ---- the body ---------------------------------------------------------------------

    def _read_body(self) -> bytes | None:
        head = self._head
        if head.is_chunked:
            return self._read_chunked()
        size = head.content_length or 0
        if len(self._buf) < size:
            return None
        body = bytes(self._buf[:size])
        del self._buf[:size]
        return body

    def _read_chunked(self) -> bytes | None:
        """RFC 9112 7.1: chunk = size [ext] CRLF data CRLF ... last-chunk trailers CRLF."""
        buf = self._buf
        while True:
            if self._chunk_phase == "size":
                line = self._take_line(self.limits.max_chunk_line_bytes, "chunk size line")
                if line is None:
                    return None
                match = _CHUNK_SIZE.fullmatch(line)
                if match is None:
                    raise Rejected("malformed_http", "invalid chunk size line")
                self._chunk_left = int(match.group(1), 16)
                if len(self._body) + self._chunk_left > self.limits.max_body_bytes:
                    raise Rejected("body_too_large",
                                    f"request body exceeds {self.limits.max_body_bytes} bytes")
                self._chunk_phase = "data" if self._chunk_left else "trailers"
            elif self._chunk_phase == "data":
                take = min(self._chunk_left, len(buf))
                if take == 0:
                    return None
                self._body += buf[:take]
                del buf[:take]
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._chunk_phase = "crlf"
            elif self._chunk_phase == "crlf":
                if len(buf) < 2:
                    if buf[:1] not in (b"", b"\r"):
                        raise Rejected("malformed_http", "chunk data not followed by CRLF")
                    return None
                if buf[:2] != b"\r\n":
                    raise Rejected("malformed_http", "chunk data not followed by CRLF")
                del buf[:2]
                self._chunk_phase = "size"
            else:
                return self._read_trailers()

    def _read_trailers(self) -> bytes | None:
        while True:
            line = self._take_line(self.limits.max_header_bytes, "trailer field")
            if line is None:
                return None
            if not line:
                return bytes(self._body)
            self._trailer_bytes += len(line) + 2
            if self._trailer_bytes > self.limits.max_header_bytes:
                raise Rejected("headers_too_large", "trailer section too large")
            if FIELD_LINE.fullmatch(line) is None:
                raise Rejected("malformed_http", "invalid trailer field")

    def _take_line(self, max_bytes: int, what: str) -> bytes | None:
        end = self._buf.find(b"\n", 0, max_bytes + 2)
        if end < 0:
            if len(self._buf) > max_bytes + 1:
                raise Rejected("malformed_http", f"{what} too long")
            return None
        line = bytes(self._buf[:end])
        del self._buf[:end + 1]
        return line[:-1] if line.endswith(b"\r") else line

    def _finish_request(self, body: bytes) -> Request:
        head = self._head
        self._head = None
        self._body = bytearray()
        self._keep_alive = head.keep_alive and not self._close_requested
        self._is_head_request = head.method == "HEAD"
        self._is_11 = head.version == "HTTP/1.1"
        self.state = HANDLING
        self.num_requests += 1
        return Request(method=head.method, path=head.target_path, query=head.query,
                       headers=head.headers, body=body, version=head.version, peer=self.peer)

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
