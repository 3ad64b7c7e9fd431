"""Server-Sent Events framing (WHATWG HTML, section 9.2 "Server-sent events").

One event is the bytes `data: <payload>\n\n`: a field line and the blank line that ends
the event. Forgetting the second newline is the classic bug: every client then merges all
chunks into one event. A line starting with `:` is a comment; we send `: ping` to keep idle
streams (no token for 15 s) alive through proxies. The OpenAI stream ends with the
literal `data: [DONE]` event.

Payloads arrive already encoded (the server's JSON encoder is `server.replies.json_bytes`;
this package knows no JSON). A single-line payload is one `data:` line; a payload that does
contain newlines is split into one `data:` line per line, as the spec requires. An event may
carry a name (`event: <name>` before its data, as the Responses API's typed events do).
"""
from __future__ import annotations

DONE: bytes = b"data: [DONE]\n\n"
PING: bytes = b": ping\n\n"


def event(payload: str | bytes, name: str | None = None) -> bytes:
    """Frame one SSE event around an already-encoded payload (str is sent as UTF-8),
    optionally named (`event: <name>` first; a name holds no line break)."""
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    lines = payload.split(b"\n")
    head = b""
    if name is not None:
        if "\n" in name or "\r" in name:
            raise ValueError(f"an SSE event name holds no line break: {name!r}")
        head = b"event: " + name.encode("utf-8") + b"\n"
    return head + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"

