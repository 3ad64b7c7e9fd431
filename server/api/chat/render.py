"""The chat answer's shapes: `chat.completion` (whole) and `chat.completion.chunk` events
(streamed), plain or with tool calls, and `renderer(spec, header)`, the chat family's one
choice among them.

With tools offered, the model's call text is split into content and calls by the text
layer: streamed, each piece arrives with its `parts` (server/text/client.py runs the
`CallSplitter` of server/text/toolparse.py as the tokens come); whole, `split_calls` reads
the complete answer. Whole answers: `ToolChatDocument`
puts `message.tool_calls` (ids from `new_call_id`; `function.arguments` as JSON text) and
`finish_reason: "tool_calls"` (a token limit keeps `length`: its complete calls are returned,
an unfinished one is dropped, and call syntax is never content). Streams: `ToolChatChunks` sends content as it comes, held-back
text once it cannot start a trigger, and each call once its JSON object is complete: first
`{index, id, type, function: {name, arguments: ""}}`, then the arguments in fragments
(server/api/tools.py `argument_fragments`). Per-token logprobs are not sent in tool-call
streams. A call repeating an earlier one ends the answer: the text layer ends its engine
request and its last piece is a stop.

When the answer thinks (`spec.thinking`), pieces carry the reasoning apart
(server/text/client.py): it goes out as `delta.reasoning_content` (vLLM's name) and, whole,
as `message.reasoning_content` (null when the model wrote none); the calls are parsed from
the answer's text only. Without thinking, not a byte changes.
"""
from __future__ import annotations

import json

from server.api import documents as docs
from server.api.generation import GenSpec
from server.api.streams import Collected, Renderer, WholeRenderer
from server.errors import ApiError
from server.replies import json_bytes
from server.api.tools import argument_fragments
from server.text.client import FinishReason, Piece, TokenLogprob
from server.text.toolformats import ToolCallFormat
from server.text.toolparse import Call, CallOut, new_call_id, split_calls
from sse import DONE, event


def _chat_entry(lp: TokenLogprob) -> dict:
    return docs.chat_logprob_entry(lp.text, lp.raw, lp.logprob, list(lp.top))


class ChatChunks:
    """chat.completion.chunk events, each naming its choice's `index` (choices interleave
    in the order their tokens arrive); each choice's first one carries the role; the usage
    chunk when asked; `[DONE]` at the end."""
    streamed = True

    def __init__(self, header: docs.Header, spec: GenSpec):
        self.header, self.include_usage = header, spec.include_usage
        self._role_sent: set[int] = set()

    def piece(self, piece: Piece) -> bytes:
        entries = None if piece.logprob is None else [_chat_entry(piece.logprob)]
        return self._frame(docs.chat_chunk(self.header, content_delta(piece), piece.finish,
                                           entries, index=piece.index), piece.index)

    def finish(self, usage: dict) -> bytes:
        tail = (event(json_bytes(docs.chat_usage_chunk(self.header, usage)))
                if self.include_usage else b"")
        return tail + DONE

    def error(self, err: ApiError) -> bytes:
        return event(json_bytes(err.document())) + DONE

    def _frame(self, chunk: dict, index: int) -> bytes:
        role = b""
        if index not in self._role_sent:
            self._role_sent.add(index)
            role = event(json_bytes(docs.chat_chunk(self.header, {"role": "assistant",
                                                                  "content": ""}, index=index)))
        return role + event(json_bytes(chunk))


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


class ToolChatChunks(ChatChunks):
    """chat.completion.chunk events with `delta.tool_calls`; finish_reason "tool_calls"."""

    def __init__(self, header: docs.Header, spec: GenSpec):
        super().__init__(header, spec)
        self.fmt = spec.tools.fmt

    def piece(self, piece: Piece) -> bytes:
        deltas = ([{"reasoning_content": piece.reasoning}] if piece.reasoning else []) \
            + chat_deltas(list(piece.parts), self.fmt)
        out = b"".join(self._frame(docs.chat_chunk(self.header, d, index=piece.index), piece.index)
                       for d in deltas)
        if piece.finish is not None:
            finish = piece.finish
            if piece.calls is not None and piece.calls.sent and finish == FinishReason.STOP:
                finish = FinishReason.TOOL_CALLS
            out += self._frame(docs.chat_chunk(self.header, {}, finish, index=piece.index), piece.index)
        return out


class ToolChatDocument(ChatDocument):
    """chat.completion with `message.tool_calls` when the answer holds calls, read from
    each choice's complete text."""

    def __init__(self, header: docs.Header, spec: GenSpec):
        super().__init__(header, spec)
        self.tools = spec.tools

    def _document(self, index: int, text: str, choice, usage: dict) -> dict:
        document = super()._document(index, text, choice, usage)
        tools = self.tools
        content, calls = split_calls(text, tools.fmt, tools.parallel, tools.forced)
        out = document["choices"][0]
        out["message"]["content"] = content          # None: the answer was call syntax only
        if calls:
            out["message"]["tool_calls"] = [call_document(c, new_call_id(tools.fmt)) for c in calls]
            if out["finish_reason"] == FinishReason.STOP:
                out["finish_reason"] = FinishReason.TOOL_CALLS
        return document


def renderer(spec: GenSpec, header: docs.Header) -> Renderer:
    """The chat answer's renderer: with tools offered, the tool-call shapes."""
    if spec.tools is not None and spec.tools.offered:
        return (ToolChatChunks if spec.stream else ToolChatDocument)(header, spec)
    return (ChatChunks if spec.stream else ChatDocument)(header, spec)
