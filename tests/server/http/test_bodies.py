"""The body readers, one per framing, each fed byte by byte: the body they return, what they
leave for the next request, and the limit or grammar error they raise (and when)."""
from __future__ import annotations

import pytest

from server.http.bodies import (READERS, ChunkPhase, ChunkedReader, ContentLengthReader, Framing,
                                NoBody, framing_of, reader_for)
from server.http.head import Rejected, interpret_head
from server.http.limits import HttpLimits

LIMITS = HttpLimits()
NEXT = b"GET /next HTTP/1.1\r\n\r\n"          # a pipelined request the reader must leave alone


def head_of(field: bytes):
    """The head of a POST with `field` (one field line) besides its Host."""
    return interpret_head(b"POST /p HTTP/1.1\r\nHost: h" + (b"\r\n" + field if field else b""),
                          LIMITS)


def feed_bytewise(reader, raw: bytes):
    """Append `raw` to a buffer one byte at a time, reading after each: (body, the byte count
    fed when the body came, what is left in the buffer)."""
    buf = bytearray()
    for i in range(len(raw)):
        buf += raw[i:i + 1]
        body = reader.read(buf)
        if body is not None:
            return body, i + 1, bytes(buf) + raw[i + 1:]
    return None, len(raw), bytes(buf)


def rejection_bytewise(reader, raw: bytes) -> tuple[str, str, int]:
    """Feed byte by byte until the reader raises: (kind, message, bytes fed by then)."""
    buf = bytearray()
    for i in range(len(raw)):
        buf += raw[i:i + 1]
        try:
            assert reader.read(buf) is None, "the reader finished instead of rejecting"
        except Rejected as exc:
            kind, message = exc.args
            return kind, message, i + 1
    raise AssertionError("the reader never rejected the input")


def test_the_table_picks_the_reader_from_the_head():
    chunked = head_of(b"Transfer-Encoding: chunked")
    sized = head_of(b"Content-Length: 3")
    empty = head_of(b"Content-Length: 0")
    bare = head_of(b"")
    assert [framing_of(h) for h in (chunked, sized, empty, bare)] == [
        Framing.CHUNKED, Framing.CONTENT_LENGTH, Framing.NONE, Framing.NONE]
    assert set(READERS) == set(Framing)
    assert isinstance(reader_for(chunked, LIMITS), ChunkedReader)
    assert isinstance(reader_for(sized, LIMITS), ContentLengthReader)
    assert isinstance(reader_for(empty, LIMITS), NoBody)
    assert isinstance(reader_for(bare, LIMITS), NoBody)


def test_no_body_is_complete_at_once_and_takes_nothing():
    buf = bytearray(NEXT)
    assert NoBody(head_of(b""), LIMITS).read(buf) == b""
    assert bytes(buf) == NEXT
    assert NoBody(head_of(b""), LIMITS).read(bytearray()) == b""


def test_content_length_body_byte_by_byte():
    reader = ContentLengthReader(head_of(b"Content-Length: 11"), LIMITS)
    body, fed, left = feed_bytewise(reader, b"hello world" + NEXT)
    assert (body, fed, left) == (b"hello world", 11, NEXT)


def test_chunked_body_byte_by_byte_with_extensions_and_trailers():
    raw = (b"5;ext=1\r\nhello\r\n1\r\n \r\nB \r\nworld, you!\r\n0\r\n"
           b"X-Trailer: t\r\nX-Other:  two words \r\n\r\n")
    reader = ChunkedReader(head_of(b"Transfer-Encoding: chunked"), LIMITS)
    body, fed, left = feed_bytewise(reader, raw + NEXT)
    assert (body, fed, left) == (b"hello world, you!", len(raw), NEXT)


def test_chunked_reader_walks_its_phases_in_grammar_order():
    reader = ChunkedReader(head_of(b"Transfer-Encoding: chunked"), LIMITS)
    phases, buf = [reader.phase], bytearray()
    for byte in b"2\r\nab\r\n0\r\n\r\n":
        buf.append(byte)
        reader.read(buf)
        if reader.phase is not phases[-1]:
            phases.append(reader.phase)
    assert phases == [ChunkPhase.SIZE, ChunkPhase.DATA, ChunkPhase.DATA_END, ChunkPhase.SIZE,
                      ChunkPhase.TRAILERS]


def test_chunked_lines_may_end_with_a_bare_lf():
    reader = ChunkedReader(head_of(b"Transfer-Encoding: chunked"), LIMITS)
    body, _, left = feed_bytewise(reader, b"3\nabc\r\n0\nX: y\n\n" + NEXT)
    assert (body, left) == (b"abc", NEXT)


CHUNKED_ERRORS = [
    # (input, limits, kind, message, bytes fed when it is raised)
    (b"zz\r\n", LIMITS, "malformed_http", "invalid chunk size line", 4),
    (b"2\r\nabX", LIMITS, "malformed_http", "chunk data not followed by CRLF", 6),
    (b"2\r\nab\rX", LIMITS, "malformed_http", "chunk data not followed by CRLF", 7),
    (b"1;" + b"e" * 60, HttpLimits(max_chunk_line_bytes=50), "malformed_http",
     "chunk size line too long", 52),
    (b"6\r\nabcdef\r\n5\r\n", HttpLimits(max_body_bytes=10), "body_too_large",
     "request body exceeds 10 bytes", 14),
    (b"0\r\nbad trailer\r\n", LIMITS, "malformed_http", "invalid trailer field", 16),
    (b"0\r\nX: " + b"v" * 40 + b"\r\n", HttpLimits(max_header_bytes=30), "malformed_http",
     "trailer field too long", 35),
    (b"0\r\nX: " + b"v" * 11 + b"\r\nY: " + b"v" * 11 + b"\r\n", HttpLimits(max_header_bytes=30),
     "headers_too_large", "trailer section too large", 35),       # 16 + 16 bytes > 30
]


@pytest.mark.parametrize("raw, limits, kind, message, fed_bytes", CHUNKED_ERRORS)
def test_chunked_errors_are_raised_as_soon_as_they_are_known(raw, limits, kind, message,
                                                             fed_bytes):
    reader = ChunkedReader(head_of(b"Transfer-Encoding: chunked"), limits)
    assert rejection_bytewise(reader, raw) == (kind, message, fed_bytes)
