"""The model's tool-call text -> OpenAI's `tool_calls`, whole or as stream deltas.

A call starts at the format's trigger (`<tool_call>`, `[TOOL_CALLS]`, `<|tool_call|>`, or
for Llama 3.1's bare JSON a `{` as the answer's first character); the text before it is
the message's `content`. After the trigger the calls are JSON objects, separated by the
format's markers, commas or whitespace, each `{"name": .., "arguments" (or "parameters"): {..}}`.
Text that does not parse as a call stays content (finish reason unchanged).

Whole answers: `ToolChatDocument` puts `message.tool_calls` (ids `call_<hex>`, Mistral's
9-character ids for that family; `function.arguments` as JSON text) and
`finish_reason: "tool_calls"`. Streams: `ToolChatChunks` sends content as it comes, holds
back text that may be the start of a trigger, and sends each call once its JSON object is
complete: first `{index, id, type, function: {name, arguments: ""}}`, then the arguments in
fragments of `ARG_FRAGMENT_CHARS` (openai-python's stream helper concatenates them).
Per-token logprobs are not sent in tool-call streams. Both run on `CallSplitter` (text in;
content text and complete `CallOut`s out), which the Responses API's renderers use too.

With parallel calls, a call identical (name and arguments) to an earlier one in the same
answer ends it and is dropped (`kept_calls`); the renderer then names the choice in its
`cut`, and the stream shell (server/api/streams.py) aborts the engine request: finish reason
"tool_calls" instead of a small model's loop of the same call until `max_tokens`.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from engine.api import FINISH_STOP
from server.api import documents as docs
from server.api.parse import GenSpec
from server.text.gentext import Piece
from server.api.streams import ChatChunks, ChatDocument
from server.api.tools import MISTRAL, ToolCallFormat

ARG_FRAGMENT_CHARS = 32
FINISH_TOOL_CALLS = "tool_calls"
SEPARATORS = (",", ";", "<|python_tag|>")       # between calls, besides the format's markers
MISTRAL_ID_CHARS = 9                             # Mistral's templates require 9 alphanumerics
_DECODER = json.JSONDecoder()

Call = tuple[str, dict]                          # (function name, arguments object)


def new_call_id(fmt: ToolCallFormat) -> str:
    if fmt == MISTRAL:
        return os.urandom(8).hex()[:MISTRAL_ID_CHARS]
    return "call_" + os.urandom(12).hex()


def _trigger(fmt: ToolCallFormat) -> str:
    return fmt.prefix or fmt.begin or "{"


def trigger_at(text: str, fmt: ToolCallFormat) -> int | None:
    """Where the calls start, or None. Bare JSON counts only as the answer's first character."""
    trigger = _trigger(fmt)
    if trigger == "{":
        stripped = text.lstrip()
        for lead in ("<|python_tag|>", "{"):
            if stripped.startswith(lead):
                return len(text) - len(stripped)
        return None
    found = text.find(trigger)
    return None if found < 0 else found


def _call_of(obj, fmt: ToolCallFormat) -> Call | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = next((obj[k] for k in (fmt.args_key, "arguments", "parameters") if k in obj), {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return (obj["name"], args) if isinstance(args, dict) else None


def parse_calls(body: str, fmt: ToolCallFormat) -> list[Call]:
    """The complete calls at the start of `body` (which begins at the trigger); an
    incomplete last object is left for later (streaming)."""
    markers = tuple(m for m in (fmt.prefix, fmt.begin, fmt.end, "[", "]") if m) + SEPARATORS
    calls: list[Call] = []
    pos = 0
    while True:
        while True:                                  # skip whitespace and markers
            stripped = body[pos:].lstrip()
            pos = len(body) - len(stripped)
            marker = next((m for m in markers if stripped.startswith(m)), None)
            if marker is None:
                break
            pos += len(marker)
        if not body.startswith("{", pos):
            return calls
        try:
            obj, pos = _DECODER.raw_decode(body, pos)
        except json.JSONDecodeError:
            return calls
        call = _call_of(obj, fmt)
        if call is None:
            return calls
        calls.append(call)


def kept_calls(calls: list[Call], parallel: bool) -> list[Call]:
    """The calls an answer keeps: the first alone without parallel calls; with them, those
    before the first call that repeats an earlier one (name and arguments): a small model
    forced to call (`required`) repeats its call until `max_tokens`, so a repeat ends it."""
    if not parallel:
        return calls[:1]
    repeat = next((k for k in range(1, len(calls)) if calls[k] in calls[:k]), len(calls))
    return calls[:repeat]


def split_calls(text: str, fmt: ToolCallFormat, parallel: bool = True) -> tuple[str | None, list[Call]]:
    """A whole answer -> (content or None, calls); no parseable call: (text, [])."""
    start = trigger_at(text, fmt)
    calls = [] if start is None else parse_calls(text[start:], fmt)
    if not calls:
        return text, []
    return (text[:start].strip() or None), kept_calls(calls, parallel)


def call_document(call: Call, call_id: str) -> dict:
    name, args = call
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


@dataclass(frozen=True)
class CallOut:
    """A complete call of a streamed answer; `index` counts the answer's calls from 0."""
    index: int
    name: str
    arguments: dict

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


class CallSplitter:
    """One answer's text in; out, in order: its content text (str) and each call (CallOut)
    once its JSON object is complete. `cut`: a call repeated an earlier one (`kept_calls`),
    so the answer ended before it and the rest of the text is ignored."""

    def __init__(self, fmt: ToolCallFormat, parallel: bool):
        self.fmt, self.parallel = fmt, parallel
        self.pending = ""                 # text held back: it may begin a trigger
        self.body: str | None = None      # from the trigger on
        self.free = False                 # bare-JSON format and the answer is text
        self.sent = 0                     # calls sent
        self.cut = False

    def push(self, text: str) -> list[str | CallOut]:
        if self.cut:
            return []
        if self.body is not None:
            self.body += text
            return self._new_calls()
        if self.free:
            return [text] if text else []
        self.pending += text
        start = trigger_at(self.pending, self.fmt)
        if start is not None:
            content, self.body, self.pending = self.pending[:start], self.pending[start:], ""
            return ([content] if content else []) + self._new_calls()
        return self._release()

    def _release(self) -> list[str | CallOut]:
        trigger = _trigger(self.fmt)
        if trigger == "{":
            if not self.pending.strip():
                return []                 # only whitespace yet: a call may still start
            self.free = True
            keep = 0
        else:
            keep = next((k for k in range(min(len(trigger) - 1, len(self.pending)), 0, -1)
                         if self.pending.endswith(trigger[:k])), 0)
        out, self.pending = self.pending[:len(self.pending) - keep], self.pending[len(self.pending) - keep:]
        return [out] if out else []

    def _new_calls(self) -> list[str | CallOut]:
        found = parse_calls(self.body, self.fmt)
        calls = kept_calls(found, self.parallel)
        self.cut = self.parallel and len(calls) < len(found)
        new = [CallOut(index, *calls[index]) for index in range(self.sent, len(calls))]
        self.sent = len(calls)
        return new

    def finish(self) -> list[str | CallOut]:
        """The end of the answer: held text goes out; a trigger with no call is content."""
        rest = self.pending if self.body is None else (self.body if self.sent == 0 else "")
        self.pending = ""
        return [rest] if rest else []


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
