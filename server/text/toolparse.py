"""The model's tool-call text -> calls: whole answers (`split_calls`) or text as it streams
(`CallSplitter`), in a family's `ToolCallFormat` (server/text/toolformats.py).

A call starts at the format's trigger (`<tool_call>`, `[TOOL_CALLS]`, `<|tool_call|>`, or
for Llama 3.1's bare JSON a `{` as the answer's first character); the text before it is
the message's content. After the trigger the calls are JSON objects, separated by the
format's markers, commas or whitespace, each `{"name": .., "arguments" (or "parameters"): {..}}`.
From the trigger on the text is call syntax and never content, however it ends: its
complete calls are kept and an unfinished last call (the token limit cut it) is dropped,
its tokens still counted. A forced choice (`required`, a named function) makes the whole
answer call syntax, from its first character (a cut inside the trigger itself included).

With parallel calls, a call identical (name and arguments) to an earlier one in the same
answer ends it and is dropped (`kept_calls`, the splitter's `cut`): a small model forced to
call repeats its call until `max_tokens` otherwise. `new_call_id` mints a call's id
(`call_<hex>`; Mistral's templates take 9 alphanumerics only).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from sse import partial_marker_chars
from server.text.toolformats import MISTRAL, ToolCallFormat

SEPARATORS = (",", ";", "<|python_tag|>")       # between calls, besides the format's markers
MISTRAL_ID_CHARS = 9                             # Mistral's templates require 9 alphanumerics
_DECODER = json.JSONDecoder()

Call = tuple[str, dict]                          # (function name, arguments object)


def new_call_id(fmt: ToolCallFormat) -> str:
    if fmt == MISTRAL:
        return os.urandom(8).hex()[:MISTRAL_ID_CHARS]
    return "call_" + os.urandom(12).hex()


def trigger_at(text: str, fmt: ToolCallFormat) -> int | None:
    """Where the calls start, or None. Bare JSON counts only as the answer's first character."""
    trigger = fmt.trigger
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
    before the first call that repeats an earlier one (name and arguments)."""
    if not parallel:
        return calls[:1]
    repeat = next((k for k in range(1, len(calls)) if calls[k] in calls[:k]), len(calls))
    return calls[:repeat]


def split_calls(text: str, fmt: ToolCallFormat, parallel: bool = True,
                forced: bool = False) -> tuple[str | None, list[Call]]:
    """A whole answer -> (content or None, its complete calls); no trigger: (text, [])."""
    start = 0 if forced else trigger_at(text, fmt)
    if start is None:
        return text, []
    return (text[:start].strip() or None), kept_calls(parse_calls(text[start:], fmt), parallel)


@dataclass(frozen=True)
class CallOut:
    """A complete call of a streamed answer; `index` counts the answer's calls from 0."""
    index: int
    name: str
    arguments: dict

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(frozen=True)
class CallState:
    """How far a streamed answer's calls have come, as of one piece: the calls sent so far,
    and whether the answer has reached its call syntax (an unfinished call included)."""
    sent: int
    in_calls: bool


class CallSplitter:
    """One answer's text in; out, in order: its content text (str) and each call (CallOut)
    once its JSON object is complete. `cut`: a call repeated an earlier one (`kept_calls`),
    so the answer ended before it and the rest of the text is ignored. `forced`: the answer
    is calls from its first character (`split_calls`)."""

    def __init__(self, fmt: ToolCallFormat, parallel: bool, forced: bool = False):
        self.fmt, self.parallel = fmt, parallel
        self.pending = ""                 # text held back: it may begin a trigger
        self.body: str | None = "" if forced else None    # from the trigger on
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
        trigger = self.fmt.trigger
        if trigger == "{":
            if not self.pending.strip():
                return []                 # only whitespace yet: a call may still start
            self.free = True
            keep = 0
        else:
            keep = partial_marker_chars(self.pending, (trigger,))
        out, self.pending = self.pending[:len(self.pending) - keep], self.pending[len(self.pending) - keep:]
        return [out] if out else []

    def _new_calls(self) -> list[str | CallOut]:
        found = parse_calls(self.body, self.fmt)
        calls = kept_calls(found, self.parallel)
        self.cut = self.parallel and len(calls) < len(found)
        new = [CallOut(index, *calls[index]) for index in range(self.sent, len(calls))]
        self.sent = len(calls)
        return new

    @property
    def in_calls(self) -> bool:
        """The answer has reached its calls (the trigger, or a forced choice's start)."""
        return self.body is not None

    def finish(self) -> list[str | CallOut]:
        """The end of the answer: text held back for a trigger that never came goes out; an
        unfinished call does not (call syntax is never content)."""
        rest = self.pending if self.body is None else ""
        self.pending = ""
        return [rest] if rest else []
