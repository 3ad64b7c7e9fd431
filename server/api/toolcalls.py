"""Tool calls as chat answers them: OpenAI's `tool_calls`, whole or as stream deltas.

The model's call text is split into content and calls by server/text/toolparse.py
(`CallSplitter`, `split_calls`); this module renders them. Whole answers: `ToolChatDocument`
puts `message.tool_calls` (ids from `new_call_id`; `function.arguments` as JSON text) and
`finish_reason: "tool_calls"`. Streams: `ToolChatChunks` sends content as it comes, held-back
text once it cannot start a trigger, and each call once its JSON object is complete: first
`{index, id, type, function: {name, arguments: ""}}`, then the arguments in fragments of
`ARG_FRAGMENT_CHARS` (openai-python's stream helper concatenates them). Per-token logprobs
are not sent in tool-call streams. A call repeating an earlier one ends the answer: the
renderer names the choice in its `cut`, and the stream shell (server/api/streams.py)
aborts the engine request (finish reason "tool_calls").
"""
from __future__ import annotations

import json

from engine.api import FINISH_STOP
from server.api import documents as docs
from server.api.parse import GenSpec
from server.text.gentext import Piece
from server.api.streams import ChatChunks, ChatDocument
from server.text.toolformats import ToolCallFormat
from server.text.toolparse import Call, CallOut, CallSplitter, new_call_id, split_calls

ARG_FRAGMENT_CHARS = 32
FINISH_TOOL_CALLS = "tool_calls"


def call_document(call: Call, call_id: str) -> dict:
    name, args = call
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def chat_deltas(outs: list[str | CallOut], fmt: ToolCallFormat) -> list[dict]:
    """Content and calls -> chat `delta`s: a call's id, name and empty arguments first, then
    its arguments in fragments of ARG_FRAGMENT_CHARS."""
    deltas = []
    for out in outs:
        if isinstance(out, str):
            deltas.append({"content": out})
            continue
        deltas.append({"tool_calls": [{"index": out.index, "id": new_call_id(fmt), "type": "function",
                                       "function": {"name": out.name, "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": out.index, "function": {"arguments": fragment}}]}
                   for fragment in argument_fragments(out.arguments_json)]
    return deltas


def argument_fragments(arguments: str) -> list[str]:
    return [arguments[at:at + ARG_FRAGMENT_CHARS] for at in range(0, len(arguments), ARG_FRAGMENT_CHARS)]


class CallScanner:
    """One choice's stream: text in, chat deltas out (content, then tool-call parts)."""

    def __init__(self, fmt: ToolCallFormat, parallel: bool):
        self.split = CallSplitter(fmt, parallel)

    @property
    def sent(self) -> int:
        return self.split.sent

    @property
    def cut(self) -> bool:
        return self.split.cut

    def push(self, text: str) -> list[dict]:
        return chat_deltas(self.split.push(text), self.split.fmt)

    def finish(self) -> list[dict]:
        return chat_deltas(self.split.finish(), self.split.fmt)


class ToolChatChunks(ChatChunks):
    """chat.completion.chunk events with `delta.tool_calls`; finish_reason "tool_calls"."""

    def __init__(self, header: docs.Header, spec: GenSpec):
        super().__init__(header, spec)
        self.fmt, self.parallel = spec.tools.fmt, spec.tools.parallel
        self._scanners: dict[int, CallScanner] = {}
        self.cut: set[int] = set()

    def piece(self, piece: Piece) -> bytes:
        scanner = self._scanners.setdefault(piece.index, CallScanner(self.fmt, self.parallel))
        deltas = scanner.push(piece.text)
        if scanner.cut:
            self.cut.add(piece.index)
        if piece.finish is not None:
            deltas += scanner.finish()
        out = b"".join(self._frame(docs.chat_chunk(self.header, d, index=piece.index), piece.index)
                       for d in deltas)
        if piece.finish is not None:
            finish = FINISH_TOOL_CALLS if scanner.sent and piece.finish == FINISH_STOP else piece.finish
            out += self._frame(docs.chat_chunk(self.header, {}, finish, index=piece.index), piece.index)
        return out


class ToolChatDocument(ChatDocument):
    """chat.completion with `message.tool_calls` when the answer holds calls; each choice's
    text also runs through a `CallSplitter` as it comes, to see a repeated call (`cut`)."""

    def __init__(self, header: docs.Header, spec: GenSpec):
        super().__init__(header, spec)
        self.fmt, self.parallel = spec.tools.fmt, spec.tools.parallel
        self._splitters: dict[int, CallSplitter] = {}
        self.cut: set[int] = set()

    def piece(self, piece: Piece) -> bytes:
        splitter = self._splitters.setdefault(piece.index, CallSplitter(self.fmt, self.parallel))
        splitter.push(piece.text)
        if splitter.cut:
            self.cut.add(piece.index)
        return super().piece(piece)

    def _document(self, index: int, text: str, choice, usage: dict) -> dict:
        document = super()._document(index, text, choice, usage)
        content, calls = split_calls(text, self.fmt, self.parallel)
        if calls:
            out = document["choices"][0]
            out["message"] = {"role": "assistant", "content": content,
                              "tool_calls": [call_document(c, new_call_id(self.fmt)) for c in calls]}
            if out["finish_reason"] == FINISH_STOP:
                out["finish_reason"] = FINISH_TOOL_CALLS
        return document


def tool_renderer(spec: GenSpec, header: docs.Header):
    """The renderer for a chat that offers tools (None: the plain ones)."""
    if spec.kind != "chat" or spec.tools is None or not spec.tools.offered:
        return None
    return (ToolChatChunks if spec.stream else ToolChatDocument)(header, spec)
