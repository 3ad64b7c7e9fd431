"""`Connection.next_event`'s two "no event now" results: NEED_DATA (the request is not all
here) and PAUSED (a request is being answered, or the connection is ending), fed byte by byte."""
from __future__ import annotations

from server.http.http11 import (CLOSING, NEED_DATA, PAUSED, Connection, HttpError, Interim,
                                Wait)
from server.http.protocol import Request, Response, ResponseHead, StreamPoll

POST = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
GET = b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n"


def test_the_two_results_are_distinct_values():
    assert NEED_DATA is not PAUSED
    assert isinstance(NEED_DATA, Wait) and isinstance(PAUSED, Wait)
    assert NEED_DATA != PAUSED


def test_a_request_arriving_byte_by_byte_needs_data_until_its_last_byte():
    conn = Connection()
    for i, byte in enumerate(POST):
        conn.receive_data(bytes([byte]))
        event = conn.next_event()
        if i < len(POST) - 1:
            assert event is NEED_DATA, (i, event)     # head and body both still arriving
    assert isinstance(event, Request) and event.body == b"abc"


def test_a_request_being_answered_pauses_even_with_the_next_one_buffered():
    conn = Connection()
    conn.receive_data(GET + GET)
    assert isinstance(conn.next_event(), Request)
    assert conn.next_event() is PAUSED             # not NEED_DATA: all of /b is buffered
    conn.send_head(ResponseHead(status=200))
    assert conn.next_event() is PAUSED             # streaming: still paused
    conn.send_poll(StreamPoll(chunks=[b"x"], done=True))
    assert isinstance(conn.next_event(), Request)  # the answer sent: the next one comes
    conn.send_response(Response(status=200))
    assert conn.next_event() is NEED_DATA          # nothing buffered: needs bytes


def test_a_partial_next_request_needs_data_once_the_answer_is_sent():
    conn = Connection()
    conn.receive_data(GET + GET[:5])
    assert isinstance(conn.next_event(), Request)
    assert conn.next_event() is PAUSED
    conn.send_response(Response(status=200))
    assert conn.next_event() is NEED_DATA
    conn.receive_data(GET[5:])
    assert isinstance(conn.next_event(), Request)


def test_a_closing_connection_is_paused_for_good():
    conn = Connection()
    conn.receive_data(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n" + GET)
    assert isinstance(conn.next_event(), Request)
    conn.send_response(Response(status=200))
    assert conn.state == CLOSING
    assert conn.next_event() is PAUSED             # the buffered /b is never parsed
    conn.receive_data(GET)
    assert conn.next_event() is PAUSED


def test_an_expect_continue_body_needs_data_after_its_interim():
    conn = Connection()
    conn.receive_data(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n"
                      b"Content-Length: 2\r\n\r\n")
    assert isinstance(conn.next_event(), Interim)
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"ok")
    assert conn.next_event().body == b"ok"


def test_an_error_is_neither_wait():
    conn = Connection()
    conn.receive_data(b"BAD\r\n\r\n")
    assert isinstance(conn.next_event(), HttpError)
