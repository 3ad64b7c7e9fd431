"""SSE framing: one `data:` line per line of payload, and a blank line ending each event."""
from __future__ import annotations

import json

from sse import DONE, PING, event


def test_event_ends_with_a_blank_line():
    assert event('{"a":1}') == b'data: {"a":1}\n\n'


def test_dict_payload_is_compact_utf8_json():
    raw = event({"content": "é", "n": [1, 2]})
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    assert raw.count(b"\n") == 2
    assert json.loads(raw[6:-2].decode("utf-8")) == {"content": "é", "n": [1, 2]}
    assert "é".encode("utf-8") in raw


def test_multiline_payload_becomes_several_data_lines():
    assert event("a\nb") == b"data: a\ndata: b\n\n"


def test_done_and_ping():
    assert DONE == b"data: [DONE]\n\n"
    assert PING == b": ping\n\n"
