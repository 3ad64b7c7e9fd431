"""The server's one JSON encoding, as SSE payloads carry it (sse/ only frames bytes)."""
from __future__ import annotations

import json

from server.replies import json_bytes
from sse import event


def test_dict_payload_is_compact_utf8_json():
    raw = event(json_bytes({"content": "é", "n": [1, 2]}))
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    assert raw.count(b"\n") == 2
    assert json.loads(raw[6:-2].decode("utf-8")) == {"content": "é", "n": [1, 2]}
    assert "é".encode("utf-8") in raw
