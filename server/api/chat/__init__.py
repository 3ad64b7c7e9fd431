"""Chat completions, `POST /v1/chat/completions`: request.py reads the request (typed
messages, tools) and holds `chat`, the handler; render.py writes the answer (whole or
streamed, plain or with tool calls).
"""
from server.api.chat.request import chat

__all__ = ["chat"]
