"""Server-Sent Events framing (WHATWG HTML, section 9.2 "Server-sent events").

One event is the bytes `data: <payload>\n\n`: a field line and the blank line that ends
the event. Forgetting the second newline is the classic bug: every client then merges all
chunks into one event. A line starting with `:` is a comment; we send `: ping` to keep idle
streams (no token for 15 s) alive through proxies. The OpenAI stream ends with the
literal `data: [DONE]` event.

Payloads here are single-line JSON documents (json.dumps never emits a raw newline), so one
`data:` line per event is enough; a payload that does contain newlines is split into one
`data:` line per line, as the spec requires.
"""
from __future__ import annotations

import json
from typing import Any

DONE: bytes = b"data: [DONE]\n\n"
PING: bytes = b": ping\n\n"


def event(payload: str | bytes | dict | list) -> bytes:
    """Frame one SSE event. A dict/list is JSON-encoded compactly (UTF-8, not ASCII-escaped)."""
    if isinstance(payload, (dict, list)):
        payload = json_bytes(payload)
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    lines = payload.split(b"\n")
    return b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def json_bytes(document: Any) -> bytes:
    """The one JSON encoding of the project: compact, UTF-8, not ASCII-escaped.

    Every JSON body the server sends (documents, errors, SSE event payloads) goes through
    here, so they all look alike: `{"a":1,"b":"é"}`."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
