"""SSE framing: one `data:` line per line of payload, and a blank line ending each event."""
from __future__ import annotations

import pytest

from sse import DONE, PING, event


def test_event_ends_with_a_blank_line():
    assert event('{"a":1}') == b'data: {"a":1}\n\n'


def test_multiline_payload_becomes_several_data_lines():
    assert event("a\nb") == b"data: a\ndata: b\n\n"


def test_done_and_ping():
    assert DONE == b"data: [DONE]\n\n"
    assert PING == b": ping\n\n"


def test_named_event_puts_the_event_line_before_the_data():
    assert event(b'{"a":1}', name="response.created") == (
        b'event: response.created\ndata: {"a":1}\n\n')


def test_an_event_name_with_a_line_break_is_refused():
    with pytest.raises(ValueError):
        event(b"{}", name="a\nb")
