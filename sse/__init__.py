"""SSE bytes and streaming text: framing (`event`, `DONE`, `PING`) and `TextStream`.

Imports nothing from `engine/` or `server/`.
"""
from sse.framing import DONE, PING, event, json_bytes
from sse.textstream import MAX_STOP_STRINGS, TextStream

__all__ = ["DONE", "PING", "event", "json_bytes", "TextStream", "MAX_STOP_STRINGS"]
