"""The Responses API, `POST /v1/responses`, stateless: its request and its two renderers.

A Responses request is a chat in other clothes, so it runs on the chat path unchanged:

    input (a string, or message items with `input_text` parts) + instructions (the system
    message) -> `parse_responses` -> a `GenSpec` (kind "responses") + the settings the
    answer echoes -> the chat template -> one engine sequence -> `GenerationStream`

Only the output shape differs, so it is two renderers with the shell's interface
(server/api/streams.py): `ResponseDocument` (one `response` object) and `ResponseEvents` (the
typed SSE events, each `event: <type>` + `data: <json>` with a `sequence_number`):

    response.created, response.in_progress, response.output_item.added,
    response.content_part.added, response.output_text.delta (one per text piece),
    response.output_text.done, response.content_part.done, response.output_item.done,
    response.completed | response.incomplete (max_output_tokens cut it) | response.failed

With function `tools` (server/api/responses_tools.py maps them, and the `function_call` /
`function_call_output` items of the history, onto chat's tool machinery), the answer's
calls become `function_call` output items after the message item (which is left out when
the answer is calls only); streamed, each call is output_item.added,
function_call_arguments.delta..., function_call_arguments.done, output_item.done.

Nothing is stored: `store: true`, `previous_response_id`, `conversation` and `background`
are 422 (there is no server-side state to keep or continue), as are built-in tools.
`text.format` json_schema / json_object go through the structured-outputs machinery
(server/api/structured.py's `Structured`, compiled per request).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from engine.api import FINISH_LENGTH, GrammarSpec, SamplingParams, schema_spec
from server.api import documents as docs
from server.api.defaults import SamplingDefaults
from server.errors import ApiError
from server.text.messages import check_content
from server.api.parse import (GenSpec, bad, boolean, integer, load_json_object, model_name,
                           number, unsupported)
from server.text.gentext import Piece
from server.api.responses_tools import (FunctionCall, call_events, function_call,
                                    function_call_item, parse_response_tools, tool_message,
                                    tools_echo)
from server.api.structured import Structured
from server.api.toolcalls import CallSplitter
from sse import event

MAX_INPUT_ITEMS = 4096          # as many as chat's MAX_MESSAGES
INPUT_ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = ("input_text", "output_text")  # output_text: an earlier answer sent back
# Items a stateful server or one with reasoning or custom (grammar) tools would take.
UNSERVED_ITEMS = frozenset({"reasoning", "item_reference", "custom_tool_call",
                            "custom_tool_call_output"})
# Request fields that need server-side state: refused when set (not when false / null).
STATEFUL_FIELDS = ("previous_response_id", "conversation")
NO_STATE = ("This server is stateless: it stores no responses, so '{name}' is not supported; "
            "send the whole conversation in 'input'.")
FORCED_CHOICES = ("required", "named")
STATUS_COMPLETED, STATUS_INCOMPLETE, STATUS_FAILED = "completed", "incomplete", "failed"
MESSAGE_NONE, MESSAGE_OPEN, MESSAGE_CLOSED = "none", "open", "closed"   # the message item's state


@dataclass(frozen=True, kw_only=True)
class ResponsesSpec:
    """A validated Responses request: the generation and what the answer echoes."""
    gen: GenSpec
    instructions: str | None = None
    max_output_tokens: int | None = None
    text_format: dict = field(default_factory=lambda: {"type": "text"})
    tool_choice: str | dict = "auto"
    parallel_tool_calls: bool = True
    metadata: dict = field(default_factory=dict)
    user: str | None = None


# ---- parsing -------------------------------------------------------------------------------

def _content(where: str, content: Any) -> str | list[dict]:
    """A message item's content: a string, or text parts (the chat check, with the
    Responses API's part types) -> chat text parts."""
    checked = check_content(where, content, TEXT_PARTS)
    if isinstance(checked, str):
        return checked
    return [{"type": "text", "text": part["text"]} for part in checked]


def _item(i: int, item: Any) -> dict:
    where = f"input[{i}]"
    if not isinstance(item, dict):
        raise bad(where, f"'{where}' must be a message item with 'role' and 'content'.")
    kind = item.get("type", "message")
    if kind in UNSERVED_ITEMS:
        raise unsupported(f"{where}.type", f"Input items of type {kind!r} are not supported "
                                           "(no stored state, reasoning or custom tools).")
    if kind != "message":
        raise bad(f"{where}.type", f"{kind!r} is not a valid input item type; expected "
                                   "'message', 'function_call' or 'function_call_output'.")
    role = item.get("role")
    if role not in INPUT_ROLES:
        raise bad(f"{where}.role", f"{role!r} is not a valid role; expected one of "
                                   f"{', '.join(sorted(INPUT_ROLES))}.")
    return {"role": role, "content": _content(f"{where}.content", item.get("content"))}


def _turns(items: list) -> list[dict]:
    """Input items -> chat messages; `function_call` items join the assistant turn before
    them (a message item or earlier calls), else start one; outputs are `tool` messages."""
    turns: list[dict] = []
    for i, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call":
            call = function_call(f"input[{i}]", item)
            if turns and turns[-1]["role"] == "assistant":
                turns[-1] = dict(turns[-1], tool_calls=turns[-1].get("tool_calls", []) + [call])
            else:
                turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            turns.append(tool_message(f"input[{i}]", item))
        else:
            turns.append(_item(i, item))
    return turns


def _messages(doc: dict, instructions: str | None) -> tuple[dict, ...]:
    """`instructions` as the system message, then `input`'s messages in order."""
    given = doc.get("input")
    if isinstance(given, str):
        items = [{"role": "user", "content": given}]
    elif isinstance(given, list) and given:
        if len(given) > MAX_INPUT_ITEMS:
            raise bad("input", f"'input' allows at most {MAX_INPUT_ITEMS} items.")
        items = _turns(given)
    else:
        raise bad("input", "'input' must be a string or a non-empty list of message items.")
    head = [] if instructions is None else [{"role": "system", "content": instructions}]
    return tuple(head + items)


def _text_format(doc: dict) -> tuple[dict, Structured | None]:
    """`text.format` -> (its echo, the grammar it asks for). `text` is a no-op."""
    text = doc.get("text")
    if text is None:
        return {"type": "text"}, None
    if not isinstance(text, dict):
        raise bad("text", "'text' must be an object with a 'format'.")
    fmt = text.get("format")
    if fmt is None:
        return {"type": "text"}, None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return fmt, None
    if kind == "json_object":
        return fmt, Structured("text.format", GrammarSpec("json_object"))
    if kind != "json_schema":
        raise bad("text.format.type", "'text.format.type' must be 'text', 'json_object' or "
                                      "'json_schema'.")
    if not isinstance(fmt.get("name"), str):
        raise bad("text.format.name", "'text.format' json_schema needs a 'name' string.")
    if not isinstance(fmt.get("schema"), (dict, bool)):
        raise bad("text.format.schema", "'text.format.schema' must be a JSON Schema object.")
    if fmt.get("strict") is not None and not isinstance(fmt["strict"], bool):
        raise bad("text.format.strict", "'strict' must be a boolean.")
    return fmt, Structured("text.format.schema", schema_spec(fmt["schema"]))


def _refuse_unserved(doc: dict) -> None:
    if doc.get("store") is True:
        raise unsupported("store", NO_STATE.format(name="store") + " Send 'store': false.")
    for name in STATEFUL_FIELDS:
        if doc.get(name) is not None:
            raise unsupported(name, NO_STATE.format(name=name))
    if doc.get("background") is True:
        raise unsupported("background", NO_STATE.format(name="background"))


def _optional_str(doc: dict, name: str) -> str | None:
    v = doc.get(name)
    if v is not None and not isinstance(v, str):
        raise bad(name, f"'{name}' must be a string.")
    return v


def parse_responses(body: bytes, defaults: SamplingDefaults = SamplingDefaults()) -> ResponsesSpec:
    doc = load_json_object(body)
    _refuse_unserved(doc)
    model = model_name(doc)
    instructions = _optional_str(doc, "instructions")
    messages = _messages(doc, instructions)
    max_output = integer(doc, "max_output_tokens", None, 1)
    fmt, structured = _text_format(doc)
    tools = parse_response_tools(doc)
    if tools is not None and tools.choice in FORCED_CHOICES and structured is not None:
        raise unsupported("tool_choice", "A forced 'tool_choice' cannot be combined with "
                                         "'text.format'.")
    metadata = doc.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad("metadata", "'metadata' must be an object.")
    params = SamplingParams(
        temperature=number(doc, "temperature", defaults.temperature, 0.0, 2.0),
        top_p=number(doc, "top_p", defaults.top_p, 0.0, 1.0, lo_open=True),
        top_k=defaults.top_k, min_p=defaults.min_p,
        repetition_penalty=defaults.repetition_penalty)
    gen = GenSpec(kind="responses", model=model, messages=messages,
                  max_tokens=defaults.max_tokens if max_output is None else max_output,
                  params=params, stream=boolean(doc, "stream"), structured=structured,
                  tools=tools)
    return ResponsesSpec(gen=gen, instructions=instructions, max_output_tokens=max_output,
                         text_format=fmt, tool_choice=doc.get("tool_choice") or "auto",
                         parallel_tool_calls=boolean(doc, "parallel_tool_calls", True),
                         metadata=metadata or {}, user=_optional_str(doc, "user"))


# ---- documents -----------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    """`resp_<24 hex>`, `msg_<24 hex>`: OpenAI's spelling of these ids."""
    return f"{prefix}_{os.urandom(12).hex()}"


def response_usage(use: dict) -> dict:
    """Chat usage -> the Responses usage (no cached or reasoning tokens are reported)."""
    return {"input_tokens": use["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": use["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": use["total_tokens"]}


def output_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, status: str, parts: list[dict]) -> dict:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": parts}


class _Answer:
    """What both renderers share: the ids, the request's echo, the text and calls so far.
    With tools offered, the text runs through a `CallSplitter` (server/api/toolcalls.py)."""

    def __init__(self, header: docs.Header, spec: ResponsesSpec):
        self.id, self.item_id = new_id("resp"), new_id("msg")
        self.created_at, self.model, self.spec = header.created, header.model, spec
        tools = spec.gen.tools
        self.splitter = (CallSplitter(tools.fmt, tools.parallel)
                         if tools is not None and tools.offered else None)
        self.parts: list[str] = []
        self.calls: list[FunctionCall] = []
        self.finish: str | None = None

    def take(self, piece: Piece) -> list[str | FunctionCall]:
        """The piece's content text and the calls it completes, in order."""
        if self.splitter is None:
            outs: list = [piece.text]
        else:
            outs = self.splitter.push(piece.text)
            if piece.finish is not None:
                outs += self.splitter.finish()
        if piece.finish is not None:
            self.finish = piece.finish
        taken = [out if isinstance(out, str) else FunctionCall.of(out, self.splitter.fmt)
                 for out in outs]
        for out in taken:
            (self.parts if isinstance(out, str) else self.calls).append(out)
        return taken

    @property
    def cut(self) -> bool:
        """A call repeated an earlier one: the answer ended there (server/api/toolcalls.py)."""
        return self.splitter is not None and self.splitter.cut

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def has_message(self) -> bool:
        """An answer of calls only has no message item; any other answer has one."""
        return any(self.parts) or not self.calls

    def status(self) -> str:
        return STATUS_INCOMPLETE if self.finish == FINISH_LENGTH else STATUS_COMPLETED

    def item(self, status: str) -> dict:
        return message_item(self.item_id, status, [output_text(self.text)])

    def output(self, status: str) -> list[dict]:
        message = [self.item(status)] if self.has_message else []
        return message + [function_call_item(call) for call in self.calls]

    def response(self, status: str, output: list[dict], use: dict | None = None,
                 error: ApiError | None = None) -> dict:
        s = self.spec
        return {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "model": self.model, "output": output,
            "error": None if error is None else {"code": "server_error",
                                                 "message": error.message},
            "incomplete_details": ({"reason": "max_output_tokens"}
                                   if status == STATUS_INCOMPLETE else None),
            "completed_at": int(time.time()) if status == STATUS_COMPLETED else None,
            "instructions": s.instructions, "max_output_tokens": s.max_output_tokens,
            "temperature": s.gen.params.temperature, "top_p": s.gen.params.top_p,
            "text": {"format": s.text_format}, "tool_choice": s.tool_choice, "tools": tools_echo(s.gen.tools),
            "parallel_tool_calls": s.parallel_tool_calls, "metadata": s.metadata,
            "user": s.user, "store": False, "background": False,
            "previous_response_id": None, "reasoning": None, "truncation": "disabled",
            "usage": None if use is None else response_usage(use)}


# ---- renderers -----------------------------------------------------------------------------

class ResponseDocument:
    """The whole answer: one `response` object from `finish`."""
    streamed = False

    def __init__(self, header: docs.Header, spec: ResponsesSpec):
        self.answer = _Answer(header, spec)

    @property
    def cut(self) -> frozenset[int]:
        return frozenset({0}) if self.answer.cut else frozenset()

    def piece(self, piece: Piece) -> bytes:
        self.answer.take(piece)
        return b""

    def finish(self, use: dict) -> bytes:
        status = self.answer.status()
        return docs.json_bytes(self.answer.response(status, self.answer.output(status), use))

    def error(self, err: ApiError) -> bytes:
        return docs.json_bytes(err.document())


class ResponseEvents(ResponseDocument):
    """The typed event stream; the opening events go out with the first piece (the head).
    The message item (output_index 0) opens at the first text, and closes when the first
    call comes or at the end; each call is the next output item."""
    streamed = True

    def __init__(self, header: docs.Header, spec: ResponsesSpec):
        super().__init__(header, spec)
        self.sequence_number = 0
        self.opened = False
        self.message = MESSAGE_NONE
        self.items = 0                          # output items added so far

    def _event(self, document: dict) -> bytes:
        document["sequence_number"] = self.sequence_number
        self.sequence_number += 1
        return event(docs.json_bytes(document), name=document["type"])

    def _place(self, kind: str, **fields) -> bytes:
        """An event about the message item (output_index 0) and its one text part."""
        return self._event({"type": kind, "item_id": self.answer.item_id, "output_index": 0,
                            "content_index": 0, **fields})

    def _open(self) -> bytes:
        if self.opened:
            return b""
        self.opened = True
        opening = self.answer.response("in_progress", [])
        return (self._event({"type": "response.created", "response": opening})
                + self._event({"type": "response.in_progress", "response": opening}))

    def _open_message(self) -> bytes:
        if self.message != MESSAGE_NONE:
            return b""
        self.message, self.items = MESSAGE_OPEN, self.items + 1
        return (self._event({"type": "response.output_item.added", "output_index": 0,
                             "item": message_item(self.answer.item_id, "in_progress", [])})
                + self._place("response.content_part.added", part=output_text("")))

    def _close_message(self, status: str) -> bytes:
        if self.message != MESSAGE_OPEN:
            return b""
        self.message, text = MESSAGE_CLOSED, self.answer.text
        return (self._place("response.output_text.done", text=text, logprobs=[])
                + self._place("response.content_part.done", part=output_text(text))
                + self._event({"type": "response.output_item.done", "output_index": 0,
                               "item": self.answer.item(status)}))

    def _text(self, text: str) -> bytes:
        opening = self._open_message()
        if not text:
            return opening
        return opening + self._place("response.output_text.delta", delta=text, logprobs=[])

    def _call(self, call: FunctionCall) -> bytes:
        closing = self._close_message(STATUS_COMPLETED)
        index, self.items = self.items, self.items + 1
        return closing + b"".join(self._event(e) for e in call_events(call, index))

    def piece(self, piece: Piece) -> bytes:
        taken = self.answer.take(piece)
        out = self._open()                      # numbered before the first item's events
        for part in taken:
            out += self._text(part) if isinstance(part, str) else self._call(part)
        return out

    def finish(self, use: dict) -> bytes:
        answer, status = self.answer, self.answer.status()
        kind = "response.completed" if status == STATUS_COMPLETED else "response.incomplete"
        out = self._open() + (self._open_message() if answer.has_message else b"")
        return (out + self._close_message(status)
                + self._event({"type": kind,
                               "response": answer.response(status, answer.output(status), use)}))

    def error(self, err: ApiError) -> bytes:
        """After the head: `response.failed`, with the text and calls produced until then."""
        failed = self.answer.response(STATUS_FAILED, self.answer.output(STATUS_INCOMPLETE),
                                      error=err)
        return self._open() + self._event({"type": "response.failed", "response": failed})


def renderer(spec: ResponsesSpec, header: docs.Header):
    return (ResponseEvents if spec.gen.stream else ResponseDocument)(header, spec)
