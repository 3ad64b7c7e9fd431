"""SSE framing: one `data:` line per line of payload, and a blank line ending each event."""
from __future__ import annotations

from sse import DONE, PING, event


def test_event_ends_with_a_blank_line():
    assert event('{"a":1}') == b'data: {"a":1}\n\n'


def test_multiline_payload_becomes_several_data_lines():
    assert event("a\nb") == b"data: a\ndata: b\n\n"


def test_done_and_ping():
    assert DONE == b"data: [DONE]\n\n"
    assert PING == b": ping\n\n"
