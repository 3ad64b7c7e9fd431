"""SSE bytes and streaming text: framing (`event`, `DONE`, `PING`) and `TextStream`.

Framing only: no JSON and no OpenAI limits (those live in `server/`).

Imports nothing from `engine/` or `server/`.
"""
from sse.framing import DONE, PING, event
from sse.textstream import TextStream, partial_marker_chars

__all__ = ["DONE", "PING", "event", "TextStream", "partial_marker_chars"]
