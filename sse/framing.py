"""Server-Sent Events framing (WHATWG HTML, section 9.2 "Server-sent events").

One event is the bytes `data: <payload>\n\n`: a field line and the blank line that ends
the event. Forgetting the second newline is the classic bug: every client then merges all
chunks into one event. A line starting with `:` is a comment; we send `: ping` to keep idle
streams (no token for 15 s) alive through proxies. The OpenAI stream ends with the
literal `data: [DONE]` event.

Payloads arrive already encoded (the server's JSON encoder is `server.http.protocol.json_bytes`;
this package knows no JSON). A single-line payload is one `data:` line; a payload that does
contain newlines is split into one `data:` line per line, as the spec requires.
"""
from __future__ import annotations

DONE: bytes = b"data: [DONE]\n\n"
PING: bytes = b": ping\n\n"


def event(payload: str | bytes) -> bytes:
    """Frame one SSE event around an already-encoded payload (str is sent as UTF-8)."""
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    lines = payload.split(b"\n")
    return b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"

