"""Request bodies, read: one small reader object per body framing, chosen by the request head.

A request's head says how its body is framed (RFC 9112 6.3): no body at all, exactly
`Content-Length` bytes, or `Transfer-Encoding: chunked` (chunks, a last empty chunk, then
trailer fields). `reader_for(head, limits)` picks the reader from `READERS`, a table keyed
by the framing; the `Connection` (server/http/http11.py) then hands the reader its input
buffer on each `next_event` until the reader returns the whole body.

A body that a `BodySink` claims (an upload, server/http/protocol.py) is read by
`SinkReader` instead: exactly `Content-Length` bytes handed to the sink as they arrive, so
the whole body is never in memory (a chunked upload is read into memory as any other body).

Each reader takes what it can from the front of the buffer and leaves the rest (a
pipelined request's bytes stay for the next head). `read(buf)` returns the decoded body
once it is complete, or None while it needs more bytes; a breach of a limit or of the
grammar is raised as `Rejected(kind, message)` (server/http/head.py), which the
`Connection` turns into its `HttpError` event. Readers do no I/O and keep no buffer of the
connection's: feeding one a byte at a time gives the same body as feeding it all at once.
"""
from __future__ import annotations

import re
from enum import Enum
from typing import Protocol

from server.http.head import FIELD_LINE, Rejected, RequestHead
from server.http.limits import HttpLimits
from server.http.protocol import BodySink

# RFC 9112 7.1: chunk-size = 1*HEXDIG, then optional BWS and extensions after ';'.
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;.*)?")


class BodyReader(Protocol):
    def read(self, buf: bytearray) -> bytes | None:
        """Consume body bytes from the front of `buf`: the whole body, or None (need more)."""


class Framing(Enum):
    """How a request's body is delimited, read off its head."""
    NONE = "none"                      # no Content-Length, no Transfer-Encoding (or length 0)
    CONTENT_LENGTH = "content-length"
    CHUNKED = "chunked"


def framing_of(head: RequestHead) -> Framing:
    if head.is_chunked:
        return Framing.CHUNKED
    return Framing.CONTENT_LENGTH if head.content_length else Framing.NONE


class NoBody:
    """A request without a body: complete at once, consumes nothing."""

    def __init__(self, head: RequestHead, limits: HttpLimits):
        pass

    def read(self, buf: bytearray) -> bytes | None:
        return b""


class ContentLengthReader:
    """Exactly `Content-Length` bytes. The head's length was checked against the body
    limit before this reader exists (the 413 comes before any body byte is read)."""

    def __init__(self, head: RequestHead, limits: HttpLimits):
        self.length_bytes = head.content_length

    def read(self, buf: bytearray) -> bytes | None:
        if len(buf) < self.length_bytes:
            return None                        # the buffer grows until the body is whole
        body = bytes(buf[:self.length_bytes])
        del buf[:self.length_bytes]
        return body


class SinkReader:
    """Exactly `Content-Length` bytes, each piece handed to the sink as it arrives; the
    body it returns is b"" (the bytes are the sink's). The length was checked against the
    sink's own limit before this reader exists."""

    def __init__(self, head: RequestHead, sink: BodySink):
        self.left_bytes = head.content_length or 0
        self.sink = sink

    def read(self, buf: bytearray) -> bytes | None:
        take = min(self.left_bytes, len(buf))
        if take:
            self.sink.write(bytes(buf[:take]))
            del buf[:take]
            self.left_bytes -= take
        return b"" if self.left_bytes == 0 else None


class ChunkPhase(Enum):
    """Where the chunked reader is in RFC 9112 7.1's grammar:
    chunk-size [ext] CRLF, chunk-data CRLF, ..., last-chunk (size 0), trailer fields, CRLF."""
    SIZE = "size"            # waiting for a chunk-size line
    DATA = "data"            # inside a chunk's data (`_chunk_left_bytes` to go)
    DATA_END = "data_end"    # the CRLF after a chunk's data
    TRAILERS = "trailers"    # after the last chunk: trailer field lines up to an empty line


class ChunkedReader:
    """`Transfer-Encoding: chunked`: chunks are decoded into the body as they arrive (the
    body limit counts decoded bytes, checked at each chunk-size line); trailer fields are
    checked against the field grammar and the header limit, then dropped."""

    def __init__(self, head: RequestHead, limits: HttpLimits):
        self.limits = limits
        self.phase = ChunkPhase.SIZE
        self._body = bytearray()
        self._chunk_left_bytes = 0
        self._trailer_bytes = 0

    def read(self, buf: bytearray) -> bytes | None:
        while True:
            if self.phase is ChunkPhase.SIZE:
                is_ready = self._read_size(buf)
            elif self.phase is ChunkPhase.DATA:
                is_ready = self._read_data(buf)
            elif self.phase is ChunkPhase.DATA_END:
                is_ready = self._read_data_end(buf)
            else:
                return self._read_trailers(buf)
            if not is_ready:
                return None

    def _read_size(self, buf: bytearray) -> bool:
        line = take_line(buf, self.limits.max_chunk_line_bytes, "chunk size line")
        if line is None:
            return False
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            raise Rejected("malformed_http", "invalid chunk size line")
        self._chunk_left_bytes = int(match.group(1), 16)
        limit = self.limits.max_body_bytes
        if len(self._body) + self._chunk_left_bytes > limit:
            raise Rejected("body_too_large", f"request body exceeds {limit} bytes")
        self.phase = ChunkPhase.DATA if self._chunk_left_bytes else ChunkPhase.TRAILERS
        return True

    def _read_data(self, buf: bytearray) -> bool:
        take = min(self._chunk_left_bytes, len(buf))
        if take == 0:
            return False
        self._body += buf[:take]
        del buf[:take]
        self._chunk_left_bytes -= take
        if self._chunk_left_bytes == 0:
            self.phase = ChunkPhase.DATA_END
        return True

    def _read_data_end(self, buf: bytearray) -> bool:
        if len(buf) < 2:
            if buf[:1] not in (b"", b"\r"):      # a wrong first byte is wrong at once
                raise Rejected("malformed_http", "chunk data not followed by CRLF")
            return False
        if buf[:2] != b"\r\n":
            raise Rejected("malformed_http", "chunk data not followed by CRLF")
        del buf[:2]
        self.phase = ChunkPhase.SIZE
        return True

    def _read_trailers(self, buf: bytearray) -> bytes | None:
        while True:
            line = take_line(buf, self.limits.max_header_bytes, "trailer field")
            if line is None:
                return None
            if not line:                           # the empty line ends the message
                return bytes(self._body)
            self._trailer_bytes += len(line) + 2
            if self._trailer_bytes > self.limits.max_header_bytes:
                raise Rejected("headers_too_large", "trailer section too large")
            if FIELD_LINE.fullmatch(line) is None:
                raise Rejected("malformed_http", "invalid trailer field")


# The one place a framing becomes its reader.
READERS: dict[Framing, type[NoBody | ContentLengthReader | ChunkedReader]] = {
    Framing.NONE: NoBody,
    Framing.CONTENT_LENGTH: ContentLengthReader,
    Framing.CHUNKED: ChunkedReader,
}


def reader_for(head: RequestHead, limits: HttpLimits) -> BodyReader:
    return READERS[framing_of(head)](head, limits)


def take_line(buf: bytearray, max_bytes: int, what: str) -> bytes | None:
    """One line (LF or CRLF ended, without its end) off the front of `buf`, or None while it
    is incomplete; a line longer than `max_bytes` is a 400 as soon as it is known to be."""
    end = buf.find(b"\n", 0, max_bytes + 2)
    if end < 0:
        if len(buf) > max_bytes + 1:
            raise Rejected("malformed_http", f"{what} too long")
        return None
    line = bytes(buf[:end])
    del buf[:end + 1]
    return line[:-1] if line.endswith(b"\r") else line
