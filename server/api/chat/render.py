"""The chat answer's shapes: `chat.completion` (whole) and `chat.completion.chunk` events
(streamed), plain or with tool calls, and `renderer(spec, header)`, the chat family's one
choice among them.

With tools offered, the model's call text is split into content and calls by
server/text/toolparse.py (`CallSplitter`, `split_calls`). Whole answers: `ToolChatDocument`
puts `message.tool_calls` (ids from `new_call_id`; `function.arguments` as JSON text) and
`finish_reason: "tool_calls"` (a token limit keeps `length`: its complete calls are returned,
an unfinished one is dropped, and call syntax is never content). Streams: `ToolChatChunks` sends content as it comes, held-back
text once it cannot start a trigger, and each call once its JSON object is complete: first
`{index, id, type, function: {name, arguments: ""}}`, then the arguments in fragments
(server/api/tools.py `argument_fragments`). Per-token logprobs are not sent in tool-call
streams. A call repeating an earlier one ends the answer: the renderer names the choice in
its `cut`, and the stream shell (server/api/streams.py) aborts the engine request.

When the answer thinks (`spec.thinking`), pieces carry the reasoning apart
(server/text/gentext.py): it goes out as `delta.reasoning_content` (vLLM's name) and, whole,
as `message.reasoning_content` (null when the model wrote none); the calls are parsed from
the answer's text only. Without thinking, not a byte changes.
"""
from __future__ import annotations

import json

from engine.api import FINISH_STOP
from server.api import documents as docs
from server.api.generation import GenSpec
from server.api.streams import Collected, Renderer, SseRenderer, WholeRenderer
from server.replies import json_bytes
from server.api.tools import argument_fragments
from server.text.gentext import Piece, TokenLogprob
from server.text.toolformats import ToolCallFormat
from server.text.toolparse import Call, CallOut, CallSplitter, new_call_id, split_calls
from sse import event

FINISH_TOOL_CALLS = "tool_calls"


def _chat_entry(lp: TokenLogprob) -> dict:
    return docs.chat_logprob_entry(lp.text, lp.raw, lp.logprob, list(lp.top))


class ChatChunks(SseRenderer):
    """chat.completion.chunk events; each choice's first one carries the role."""

    def __init__(self, header: docs.Header, spec: GenSpec):
        super().__init__(header, spec)
        self._role_sent: set[int] = set()

    def _frame(self, chunk: dict, index: int) -> bytes:
        role = b""
        if index not in self._role_sent:
            self._role_sent.add(index)
            role = event(json_bytes(docs.chat_chunk(self.header, {"role": "assistant",
                                                                  "content": ""}, index=index)))
        return role + super()._frame(chunk, index)

    def _chunk(self, piece: Piece) -> dict:
        entries = None if piece.logprob is None else [_chat_entry(piece.logprob)]
        return docs.chat_chunk(self.header, content_delta(piece), piece.finish, entries,
                               index=piece.index)

    def _usage_chunk(self, usage: dict) -> dict:
        return docs.chat_usage_chunk(self.header, usage)


def content_delta(piece: Piece) -> dict:
    """A piece's delta: its content; reasoning first when it holds some (content then only
    when there is any)."""
    if not piece.reasoning:
        return {"content": piece.text}
    return {"reasoning_content": piece.reasoning, **({"content": piece.text} if piece.text else {})}


class ChatDocument(WholeRenderer):
    def _document(self, index: int, text: str, choice: Collected, usage: dict) -> dict:
        entries = [_chat_entry(e) for e in choice.entries] if self.logprobs else None
        document = docs.chat_completion(self.header, text, choice.finish, usage, entries,
                                        index=index)
        if self.thinks:
            document["choices"][0]["message"]["reasoning_content"] = "".join(choice.reasoning) or None
        return document


def call_document(call: Call, call_id: str) -> dict:
    name, args = call
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def chat_deltas(outs: list[str | CallOut], fmt: ToolCallFormat) -> list[dict]:
    """Content and calls -> chat `delta`s: a call's id, name and empty arguments first, then
    its arguments in fragments (`argument_fragments`)."""
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


class CallScanner:
    """One choice's stream: text in, chat deltas out (content, then tool-call parts)."""

    def __init__(self, fmt: ToolCallFormat, parallel: bool, forced: bool = False):
        self.split = CallSplitter(fmt, parallel, forced)

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
        self.tools = spec.tools
        self._scanners: dict[int, CallScanner] = {}
        self.cut: set[int] = set()

    def piece(self, piece: Piece) -> bytes:
        tools = self.tools
        scanner = self._scanners.setdefault(piece.index, CallScanner(tools.fmt, tools.parallel,
                                                                     tools.forced))
        deltas = ([{"reasoning_content": piece.reasoning}] if piece.reasoning else []) \
            + scanner.push(piece.text)
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
        self.tools = spec.tools
        self._splitters: dict[int, CallSplitter] = {}
        self.cut: set[int] = set()

    def piece(self, piece: Piece) -> bytes:
        tools = self.tools
        splitter = self._splitters.setdefault(piece.index, CallSplitter(tools.fmt, tools.parallel,
                                                                        tools.forced))
        splitter.push(piece.text)
        if splitter.cut:
            self.cut.add(piece.index)
        return super().piece(piece)

    def _document(self, index: int, text: str, choice, usage: dict) -> dict:
        document = super()._document(index, text, choice, usage)
        tools = self.tools
        content, calls = split_calls(text, tools.fmt, tools.parallel, tools.forced)
        out = document["choices"][0]
        out["message"]["content"] = content          # None: the answer was call syntax only
        if calls:
            out["message"]["tool_calls"] = [call_document(c, new_call_id(tools.fmt)) for c in calls]
            if out["finish_reason"] == FINISH_STOP:
                out["finish_reason"] = FINISH_TOOL_CALLS
        return document


def renderer(spec: GenSpec, header: docs.Header) -> Renderer:
    """The chat answer's renderer: with tools offered, the tool-call shapes."""
    if spec.tools is not None and spec.tools.offered:
        return (ToolChatChunks if spec.stream else ToolChatDocument)(header, spec)
    return (ChatChunks if spec.stream else ChatDocument)(header, spec)
