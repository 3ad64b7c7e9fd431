"""The Responses answer: two renderers with the stream shell's interface
(server/api/streams.py): `ResponseDocument` (one `response` object) and `ResponseEvents` (the
typed SSE events, each `event: <type>` + `data: <json>` with a `sequence_number`):

    response.created, response.in_progress, response.output_item.added,
    response.content_part.added, response.output_text.delta (one per text piece),
    response.output_text.done, response.content_part.done, response.output_item.done,
    response.completed | response.incomplete (max_output_tokens cut it) | response.failed

With tools offered, each piece comes split into content and calls (its `parts`: the text
layer's `CallSplitter`, server/text/client.py): the answer's calls become `function_call` output items after the message item (left out when
the answer is calls only), their events from server/api/responses/tools.py.

When the answer thinks (server/text/reasoning.py), its reasoning is a `reasoning` item
before the message (OpenAI's shape: `summary` [], `content` [{"type": "reasoning_text"}]),
streamed as output_item.added, content_part.added, response.reasoning_text.delta...,
response.reasoning_text.done, content_part.done, output_item.done; the items after it
take the next output indexes.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from server.api import documents as docs
from server import replies
from server.api.responses.parse import ResponsesSpec
from server.api.responses.tools import FunctionCall, call_events, function_call_item, tools_echo
from server.errors import ApiError
from server.text.client import FinishReason, Piece
from sse import event

STATUS_COMPLETED, STATUS_INCOMPLETE, STATUS_FAILED = "completed", "incomplete", "failed"
MESSAGE_NONE, MESSAGE_OPEN, MESSAGE_CLOSED = "none", "open", "closed"   # the message item's state


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


def reasoning_text(text: str) -> dict:
    return {"type": "reasoning_text", "text": text}


def reasoning_item(item_id: str, status: str, parts: list[dict]) -> dict:
    return {"id": item_id, "type": "reasoning", "summary": [], "content": parts,
            "status": status}


@dataclass(frozen=True)
class Thought:
    """Reasoning text of a piece (the answer's text comes as plain str)."""
    text: str


class _Answer:
    """What both renderers share: the ids, the request's echo, the text and calls so far."""

    def __init__(self, header: docs.Header, spec: ResponsesSpec):
        self.id, self.item_id, self.reasoning_id = new_id("resp"), new_id("msg"), new_id("rs")
        self.created_at, self.model, self.spec = header.created, header.model, spec
        tools = spec.gen.tools
        self.thinks = spec.gen.thinking is not None     # empty answer text waits for real text
        self.fmt = tools.fmt if tools is not None and tools.offered else None
        self.in_calls = False                   # the answer has reached its call syntax
        self.parts: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[FunctionCall] = []
        self.finish: str | None = None

    def take(self, piece: Piece) -> list[Thought | str | FunctionCall]:
        """The piece's reasoning, content text and the calls it completes, in order."""
        thought = [Thought(piece.reasoning)] if piece.reasoning else []
        self.thoughts.append(piece.reasoning)
        if self.fmt is None:
            outs: list = [piece.text] if piece.text or not self.thinks else []
        else:                                   # split by the text layer as it came
            outs = list(piece.parts)
            self.in_calls = piece.calls is not None and piece.calls.in_calls
        if piece.finish is not None:
            self.finish = piece.finish
        taken = [out if isinstance(out, str) else FunctionCall.of(out, self.fmt)
                 for out in outs]
        for out in taken:
            (self.parts if isinstance(out, str) else self.calls).append(out)
        return thought + taken

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.thoughts)

    @property
    def has_message(self) -> bool:
        """An answer of calls only (an unfinished one too) has no message item; any other
        answer has one."""
        return any(self.parts) or not (self.calls or self.in_calls)

    def status(self) -> str:
        return STATUS_INCOMPLETE if self.finish == FinishReason.LENGTH else STATUS_COMPLETED

    def item(self, status: str) -> dict:
        return message_item(self.item_id, status, [output_text(self.text)])

    def reasoning_item(self, status: str) -> dict:
        return reasoning_item(self.reasoning_id, status, [reasoning_text(self.reasoning)])

    def output(self, status: str) -> list[dict]:
        thought = [self.reasoning_item(status)] if self.reasoning else []
        message = [self.item(status)] if self.has_message else []
        return thought + message + [function_call_item(call) for call in self.calls]

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

    def piece(self, piece: Piece) -> bytes:
        self.answer.take(piece)
        return b""

    def finish(self, use: dict) -> bytes:
        status = self.answer.status()
        return replies.json_bytes(self.answer.response(status, self.answer.output(status), use))

    def error(self, err: ApiError) -> bytes:
        return replies.json_bytes(err.document())


class ResponseEvents(ResponseDocument):
    """The typed event stream; the opening events go out with the first piece (the head).
    The reasoning item (when the answer thinks) opens at the first reasoning text and closes
    at the first answer text; the message item opens at the first text, and closes when the
    first call comes or at the end; each call is the next output item."""
    streamed = True

    def __init__(self, header: docs.Header, spec: ResponsesSpec):
        super().__init__(header, spec)
        self.sequence_number = 0
        self.opened = False
        self.message = self.thought = MESSAGE_NONE
        self.message_index = self.thought_index = 0
        self.items = 0                          # output items added so far

    def _event(self, document: dict) -> bytes:
        document["sequence_number"] = self.sequence_number
        self.sequence_number += 1
        return event(replies.json_bytes(document), name=document["type"])

    def _place(self, kind: str, **fields) -> bytes:
        """An event about the message item and its one text part."""
        return self._event({"type": kind, "item_id": self.answer.item_id,
                            "output_index": self.message_index, "content_index": 0, **fields})

    def _place_thought(self, kind: str, **fields) -> bytes:
        """An event about the reasoning item and its one reasoning_text part."""
        return self._event({"type": kind, "item_id": self.answer.reasoning_id,
                            "output_index": self.thought_index, "content_index": 0, **fields})

    def _thought(self, text: str) -> bytes:
        out = b""
        if self.thought == MESSAGE_NONE:
            self.thought, self.thought_index, self.items = MESSAGE_OPEN, self.items, self.items + 1
            out = (self._event({"type": "response.output_item.added", "output_index": self.thought_index,
                                "item": reasoning_item(self.answer.reasoning_id, "in_progress", [])})
                   + self._place_thought("response.content_part.added", part=reasoning_text("")))
        return out + self._place_thought("response.reasoning_text.delta", delta=text)

    def _close_thought(self, status: str) -> bytes:
        if self.thought != MESSAGE_OPEN:
            return b""
        self.thought, text = MESSAGE_CLOSED, self.answer.reasoning
        return (self._place_thought("response.reasoning_text.done", text=text)
                + self._place_thought("response.content_part.done", part=reasoning_text(text))
                + self._event({"type": "response.output_item.done", "output_index": self.thought_index,
                               "item": self.answer.reasoning_item(status)}))

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
        closing = self._close_thought(STATUS_COMPLETED)
        self.message, self.message_index, self.items = MESSAGE_OPEN, self.items, self.items + 1
        return closing + (self._event({"type": "response.output_item.added", "output_index": self.message_index,
                             "item": message_item(self.answer.item_id, "in_progress", [])})
                + self._place("response.content_part.added", part=output_text("")))

    def _close_message(self, status: str) -> bytes:
        if self.message != MESSAGE_OPEN:
            return b""
        self.message, text = MESSAGE_CLOSED, self.answer.text
        return (self._place("response.output_text.done", text=text, logprobs=[])
                + self._place("response.content_part.done", part=output_text(text))
                + self._event({"type": "response.output_item.done", "output_index": self.message_index,
                               "item": self.answer.item(status)}))

    def _text(self, text: str) -> bytes:
        opening = self._open_message()
        if not text:
            return opening
        return opening + self._place("response.output_text.delta", delta=text, logprobs=[])

    def _call(self, call: FunctionCall) -> bytes:
        closing = self._close_thought(STATUS_COMPLETED) + self._close_message(STATUS_COMPLETED)
        index, self.items = self.items, self.items + 1
        return closing + b"".join(self._event(e) for e in call_events(call, index))

    def piece(self, piece: Piece) -> bytes:
        taken = self.answer.take(piece)
        out = self._open()                      # numbered before the first item's events
        for part in taken:
            if isinstance(part, Thought):
                out += self._thought(part.text)
            else:
                out += self._text(part) if isinstance(part, str) else self._call(part)
        return out

    def finish(self, use: dict) -> bytes:
        answer, status = self.answer, self.answer.status()
        kind = "response.completed" if status == STATUS_COMPLETED else "response.incomplete"
        out = self._open() + self._close_thought(status)
        out += self._open_message() if answer.has_message else b""
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
