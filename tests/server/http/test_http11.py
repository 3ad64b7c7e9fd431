"""The sans-IO HTTP/1.1 connection: every input split at every offset, framing rules, limits."""
from __future__ import annotations

import json

import pytest

from server.http.http11 import (CLOSING, CONTINUE_BYTES, HANDLING, IDLE, NEED_DATA, PAUSED,
                                Connection, HttpError, Interim, ProtocolMisuse, Wait)
from server.errors import ApiError, error_response
from server.http.limits import HttpLimits
from server.http.protocol import Request, Response, ResponseHead

GET = b"GET /v1/models?limit=2 HTTP/1.1\r\nHost: example\r\nX-Request-Id: abc\r\n\r\n"
POST_CL = (b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
           b"Content-Length: 11\r\n\r\nhello world")
POST_CHUNKED = (b"POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5;ext=1\r\nhello\r\n1\r\n \r\nB \r\nworld, you!\r\n0\r\nX-Trailer: t\r\n\r\n")


def events_from(pieces, conn=None):
    """Feed pieces one at a time; collect every event (Requests, Interims, an HttpError last)."""
    conn = conn or Connection()
    found = []
    for piece in pieces:
        conn.receive_data(piece)
        while not isinstance(event := conn.next_event(), Wait):
            found.append(event)
            if isinstance(event, HttpError):          # the connection ends after an error
                return conn, found
    return conn, found


def error_from(pieces, conn=None) -> HttpError:
    """Feed pieces until the parser returns its error event; fail if it never does."""
    _, found = events_from(pieces, conn)
    assert found and isinstance(found[-1], HttpError), found
    return found[-1]


def error_event(conn: Connection) -> HttpError:
    err = conn.next_event()
    assert isinstance(err, HttpError), err
    return err


def splits(raw: bytes):
    """The input whole, cut at every offset into two, and byte by byte."""
    yield [raw]
    for cut in range(1, len(raw)):
        yield [raw[:cut], raw[cut:]]
    yield [raw[i:i + 1] for i in range(len(raw))]


def parse_response(raw: bytes):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, status, reason = lines[0].split(" ", 2)
    fields = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
    return int(status), reason, fields, body


def rendered(err: HttpError) -> Response:
    """What the loop does with an error event: the application's table renders it."""
    return error_response(ApiError(err.kind, err.message))


def field(fields, name):
    values = [value for key, value in fields if key.lower() == name.lower()]
    return values[0] if values else None


# ---- parsing at every split offset --------------------------------------------------------

def test_get_request_parsed_identically_at_every_split():
    for pieces in splits(GET):
        _, found = events_from(pieces)
        assert found == [Request(method="GET", path="/v1/models", query="limit=2",
                                 headers=(("host", "example"), ("x-request-id", "abc")),
                                 version="HTTP/1.1")]


def test_content_length_body_at_every_split():
    for pieces in splits(POST_CL):
        _, found = events_from(pieces)
        assert len(found) == 1
        assert found[0].body == b"hello world"
        assert found[0].header("Content-Type") == "application/json"


def test_chunked_body_with_extensions_and_trailers_at_every_split():
    for pieces in splits(POST_CHUNKED):
        conn, found = events_from(pieces)
        assert [r.body for r in found] == [b"hello world, you!"]
        assert conn.state == HANDLING and conn.buffered_bytes == 0


def test_chunk_data_must_end_with_crlf_not_any_two_bytes():
    """`2 CRLF abXY 0 CRLF CRLF`: the two bytes after a chunk's data are its CRLF, so XY is
    a framing error (400), never skipped to leave the body `ab`, at any split."""
    raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY0\r\n\r\n"
    for pieces in splits(raw):
        _, found = events_from(pieces)
        assert [type(event) for event in found] == [HttpError], found
        assert found[0].kind == "malformed_http"
        assert rendered(found[0]).status == 400


def test_bare_lf_line_endings_and_leading_blank_lines_are_accepted():
    raw = b"\r\n\nGET /x HTTP/1.1\nHost: a\n\n"
    for pieces in splits(raw):
        _, found = events_from(pieces)
        assert [(r.method, r.path, r.headers) for r in found] == [("GET", "/x", (("host", "a"),))]


def test_header_values_are_trimmed_and_names_lowercased():
    _, found = events_from([b"GET / HTTP/1.1\r\nX-Thing:   spaced value \t\r\nACCEPT:*/*\r\n\r\n"])
    assert found[0].headers == (("x-thing", "spaced value"), ("accept", "*/*"))


def test_absolute_form_target_keeps_only_path_and_query():
    _, found = events_from([b"GET http://example.com:80/v1/models?a=b HTTP/1.1\r\n\r\n"])
    assert (found[0].path, found[0].query) == ("/v1/models", "a=b")
    conn = Connection()
    _, found = events_from([b"OPTIONS * HTTP/1.1\r\n\r\n"], conn)
    assert found[0].path == "*"


def test_peer_is_passed_through():
    _, found = events_from([GET], Connection(peer="127.0.0.1:5555"))
    assert found[0].peer == "127.0.0.1:5555"


# ---- pipelining and keep-alive ------------------------------------------------------------

def test_pipelined_requests_are_released_one_response_at_a_time():
    conn = Connection()
    conn.receive_data(GET + POST_CL + GET)
    first = conn.next_event()
    assert first.method == "GET"
    assert conn.next_event() is PAUSED               # busy until the response is sent
    conn.send_response(Response(status=200, body=b"1"))
    assert conn.next_event().body == b"hello world"
    assert conn.next_event() is PAUSED
    conn.send_response(Response(status=200))
    assert conn.next_event().method == "GET"
    assert conn.num_requests == 3


def test_http11_keeps_alive_by_default_and_honours_connection_close():
    conn, _ = events_from([GET])
    status, _, fields, body = parse_response(conn.send_response(Response(status=200, body=b"ok")))
    assert (status, field(fields, "Connection"), field(fields, "Content-Length"), body) == (
        200, "keep-alive", "2", b"ok")
    assert conn.state == IDLE
    conn, _ = events_from([b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"])
    _, _, fields, _ = parse_response(conn.send_response(Response(status=200)))
    assert field(fields, "Connection") == "close" and conn.state == CLOSING


def test_http10_closes_unless_keep_alive_is_asked_for():
    conn, found = events_from([b"GET / HTTP/1.0\r\n\r\n"])
    assert found[0].version == "HTTP/1.0"
    _, _, fields, _ = parse_response(conn.send_response(Response(status=200)))
    assert field(fields, "Connection") == "close" and conn.state == CLOSING
    conn, _ = events_from([b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"])
    _, _, fields, _ = parse_response(conn.send_response(Response(status=200)))
    assert field(fields, "Connection") == "keep-alive" and conn.state == IDLE


def test_app_connection_close_header_ends_the_connection_and_framing_headers_are_ours():
    conn, _ = events_from([GET])
    raw = conn.send_response(Response(status=200, body=b"abc", headers=(
        ("Connection", "close"), ("Content-Length", "999"), ("X-Request-Id", "r1"))))
    _, _, fields, body = parse_response(raw)
    assert [k for k, _ in fields] == ["X-Request-Id", "Content-Length", "Connection"]
    assert field(fields, "Content-Length") == "3" and field(fields, "Connection") == "close"
    assert conn.state == CLOSING


def test_request_close_marks_the_next_response_close():
    conn, _ = events_from([GET])
    conn.request_close()
    _, _, fields, _ = parse_response(conn.send_response(Response(status=503)))
    assert field(fields, "Connection") == "close"


def test_head_response_has_length_but_no_body():
    conn, _ = events_from([b"HEAD /v1/models HTTP/1.1\r\n\r\n"])
    status, _, fields, body = parse_response(conn.send_response(Response(status=200, body=b"12345")))
    assert (field(fields, "Content-Length"), body) == ("5", b"")


# ---- streaming responses ------------------------------------------------------------------

def test_stream_of_unknown_length_is_chunked_on_http11():
    conn, _ = events_from([GET])
    head = conn.send_head(ResponseHead(status=200, headers=(("Content-Type", "text/event-stream"),)))
    status, _, fields, rest = parse_response(head)
    assert status == 200 and rest == b""
    assert field(fields, "Transfer-Encoding") == "chunked" and field(fields, "Content-Length") is None
    assert conn.send_data(b"data: 1\n\n") == b"9\r\ndata: 1\n\n\r\n"
    assert conn.send_data(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"
    assert conn.send_data(b"") == b""                # an empty chunk would end the body
    assert conn.send_end() == b"0\r\n\r\n"
    assert conn.state == IDLE


def test_stream_of_unknown_length_is_close_delimited_on_http10():
    conn, _ = events_from([b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"])
    _, _, fields, _ = parse_response(conn.send_head(ResponseHead(status=200)))
    assert field(fields, "Transfer-Encoding") is None and field(fields, "Connection") == "close"
    assert conn.send_data(b"abc") == b"abc"
    assert conn.send_end() == b""
    assert conn.state == CLOSING


def test_stream_with_known_length_is_not_chunked_and_must_match():
    conn, _ = events_from([GET])
    _, _, fields, _ = parse_response(conn.send_head(ResponseHead(status=200, content_length=4)))
    assert field(fields, "Content-Length") == "4"
    assert conn.send_data(b"ab") == b"ab"
    with pytest.raises(ProtocolMisuse):
        conn.send_data(b"cde")
    with pytest.raises(ProtocolMisuse):
        conn.send_end()


def test_calls_in_the_wrong_state_are_misuse():
    conn = Connection()
    with pytest.raises(ProtocolMisuse):
        conn.send_response(Response(status=200))
    conn, _ = events_from([GET])
    with pytest.raises(ProtocolMisuse):
        conn.send_data(b"x")


def test_response_header_injection_is_refused():
    conn, _ = events_from([GET])
    with pytest.raises(ProtocolMisuse):
        conn.send_response(Response(status=200, headers=(("X-A", "a\r\nSet-Cookie: b"),)))


# ---- Expect: 100-continue -----------------------------------------------------------------

def test_expect_continue_asks_for_the_body_before_it_arrives():
    head = b"POST /x HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
    conn, found = events_from([head])
    assert found == [Interim(CONTINUE_BYTES)]
    assert CONTINUE_BYTES == b"HTTP/1.1 100 Continue\r\n\r\n"
    _, found = events_from([b"abcde"], conn)
    assert [r.body for r in found] == [b"abcde"]


def test_expect_continue_is_not_sent_when_the_body_is_already_here_or_empty_or_http10():
    _, found = events_from([b"POST /x HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\nhi"])
    assert [type(e) for e in found] == [Request]
    _, found = events_from([b"POST /x HTTP/1.1\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n"])
    assert [type(e) for e in found] == [Request]
    _, found = events_from([b"POST /x HTTP/1.0\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"])
    assert found == []


def test_oversized_body_with_expect_is_refused_before_any_continue():
    limits = HttpLimits(max_body_bytes=10)
    conn = Connection(limits=limits)
    conn.receive_data(b"POST /x HTTP/1.1\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n")
    err = error_event(conn)
    assert err.kind == "body_too_large"


# ---- errors and limits --------------------------------------------------------------------

MALFORMED = [
    (b"GET /\r\n\r\n", "malformed_http"),                               # HTTP/0.9 style
    (b"GET  / HTTP/1.1\r\n\r\n", "malformed_http"),                     # two spaces
    (b"G(T / HTTP/1.1\r\n\r\n", "malformed_http"),                      # not a token
    (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", "malformed_http"),          # space before colon
    (b"GET / HTTP/1.1\r\nX: a\r\n  folded\r\n\r\n", "malformed_http"),  # obs-fold
    (b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", "malformed_http"),           # bare CR in a value
    (b"GET / HTTP/1.1\r\nnocolon\r\n\r\n", "malformed_http"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "malformed_http"),
    (b"GET nopath HTTP/1.1\r\n\r\n", "malformed_http"),
    (b"GET / HTTP/2.0\r\n\r\n", "http_version_not_supported"),
    (b"GET / HTTP/1.2\r\n\r\n", "http_version_not_supported"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", "malformed_http"),
    (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "malformed_http"),
    (b"POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", "malformed_http"),
    (b"POST / HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n", "malformed_http"),
    (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", "malformed_http"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "not_implemented"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", "malformed_http"),
    (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "malformed_http"),
    (b"POST / HTTP/1.1\r\nExpect: the-unexpected\r\n\r\n", "expectation_failed"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed_http"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", "malformed_http"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n", "malformed_http"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n",
     "malformed_http"),
]


@pytest.mark.parametrize("raw, kind", MALFORMED)
def test_bad_requests_raise_the_right_kind_whole_and_byte_by_byte(raw, kind):
    for pieces in ([raw], [raw[i:i + 1] for i in range(len(raw))]):
        conn = Connection()
        err = error_from(pieces, conn)
        assert err.kind == kind


def test_consistent_repeated_content_length_is_one_value():
    _, found = events_from([b"POST / HTTP/1.1\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nok"])
    assert found[0].body == b"ok"


def test_header_block_over_the_limit_is_431_with_or_without_its_end():
    limits = HttpLimits(max_header_bytes=64)
    big = b"GET / HTTP/1.1\r\nX: " + b"a" * 60 + b"\r\n\r\n"
    for pieces in ([big], [big[:-4]], [big[i:i + 1] for i in range(len(big))]):
        err = error_from(pieces, Connection(limits=limits))
        assert err.kind == "headers_too_large"
    just_fits = b"GET / HTTP/1.1\r\nX: " + b"a" * (64 - 23) + b"\r\n\r\n"
    assert len(just_fits) == 64
    _, found = events_from([just_fits], Connection(limits=limits))
    assert len(found) == 1


def test_too_many_header_fields_is_431():
    raw = b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(5)) + b"\r\n"
    err = error_from([raw], Connection(limits=HttpLimits(max_header_count=4)))
    assert err.kind == "headers_too_large"
    _, found = events_from([raw], Connection(limits=HttpLimits(max_header_count=5)))
    assert len(found[0].headers) == 5


def test_body_over_the_limit_is_413_for_content_length_and_chunked():
    limits = HttpLimits(max_body_bytes=10)
    err = error_from([b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n"], Connection(limits=limits))
    assert err.kind == "body_too_large"
    chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n5\r\n"
    err = error_from([chunked], Connection(limits=limits))
    assert err.kind == "body_too_large"
    ok = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n4\r\nghij\r\n0\r\n\r\n"
    _, found = events_from([ok], Connection(limits=limits))
    assert found[0].body == b"abcdefghij"


def test_overlong_chunk_size_line_is_400():
    raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;" + b"e" * 100
    err = error_from([raw], Connection(limits=HttpLimits(max_chunk_line_bytes=50)))
    assert err.kind == "malformed_http"


def test_eof_inside_a_request_is_malformed_but_between_requests_is_quiet():
    conn = Connection()
    conn.receive_data(b"GET / HT")
    conn.receive_data(b"")
    error_event(conn)
    conn = Connection()
    conn.receive_data(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab")
    conn.receive_data(b"")
    error_event(conn)
    conn = Connection()
    conn.receive_data(b"")
    assert conn.next_event() is NEED_DATA and conn.is_eof


def test_partial_request_is_reported_for_timeouts():
    conn = Connection()
    assert not conn.has_partial_request
    conn.receive_data(b"GET / HTTP/1.1\r\n")
    assert conn.next_event() is NEED_DATA and conn.has_partial_request
    conn.receive_data(b"\r\n")
    assert isinstance(conn.next_event(), Request) and not conn.has_partial_request


def test_send_error_renders_the_openai_error_and_closes():
    conn = Connection()
    conn.receive_data(b"BAD\r\n\r\n")
    err = error_event(conn)
    status, reason, fields, body = parse_response(conn.send_error(rendered(err)))
    assert (status, reason) == (400, "Bad Request")
    assert field(fields, "Content-Type") == "application/json"
    assert field(fields, "Connection") == "close"
    assert int(field(fields, "Content-Length")) == len(body)
    error = json.loads(body)["error"]
    assert error["code"] == "malformed_request" and error["type"] == "invalid_request_error"
    assert error["message"] == "invalid request line" and error["param"] is None
    assert conn.state == CLOSING


@pytest.mark.parametrize("kind, status", [("headers_too_large", 431), ("body_too_large", 413),
                                          ("request_timeout", 408), ("not_implemented", 501),
                                          ("http_version_not_supported", 505),
                                          ("expectation_failed", 417)])
def test_send_error_statuses_come_from_the_error_table(kind, status):
    conn = Connection()
    raw = conn.send_error(rendered(HttpError(kind, "m")))
    assert parse_response(raw)[0] == status
