"""The Anthropic answer: `MessageDocument` (one `message` object) and `MessageEvents` (its SSE
events), both with the stream shell's `Renderer` interface (server/api/streams.py), and
`renderer(spec, header, input_tokens)`, the choice between them.

The content blocks, in order: a `thinking` block when the answer thought (its `signature`
an opaque checksum of the thinking text, never checked when sent back), a `text` block
when it wrote text, then one `tool_use` block per call (`input` the parsed arguments; the
grammar made them valid against `input_schema`). With tools offered the pieces come split
into text and calls (`Piece.parts`, the text layer's `CallSplitter`), the same split for
both renderers, so the streamed events add up to the whole message.

    stop_reason   max_tokens (a token limit) | stop_sequence (+ `stop_sequence`, the string
                  that matched) | tool_use (the answer made calls) | end_turn

Streamed, each event is an `event: <type>` line and its `data:` line:

    message_start (the message with empty content, usage.input_tokens), ping,
    per block: content_block_start, content_block_delta... (text_delta, thinking_delta +
    a signature_delta before its stop, input_json_delta with `partial_json`),
    content_block_stop; message_delta (stop_reason, stop_sequence, usage.output_tokens),
    message_stop; an error after the head is an `error` event.
"""
from __future__ import annotations

import base64
import hashlib
import os

from server.api import documents as docs
from server.api.generation import GenSpec
from server.api.streams import Renderer
from server.api.tools import argument_fragments
from server.errors import ApiError, ErrorShape
from server.replies import json_bytes
from server.text.client import FinishReason, Piece
from server.text.toolparse import CallOut
from sse import event

ID_PREFIX = "msg"
END_TURN, MAX_TOKENS, STOP_SEQUENCE, TOOL_USE = "end_turn", "max_tokens", "stop_sequence", "tool_use"
THINKING, TEXT, TOOL_USE_BLOCK = "thinking", "text", "tool_use"


def message_id(header: docs.Header) -> str:
    """`msg_<24 hex>`, Anthropic's spelling, from the header's one id."""
    return ID_PREFIX + "_" + header.id.removeprefix(ID_PREFIX + "-")


def tool_use_id() -> str:
    return "toolu_" + os.urandom(12).hex()


def signature(thinking: str) -> str:
    """A thinking block's signature: opaque to the client, here a checksum of its text."""
    return base64.b64encode(hashlib.sha256(thinking.encode("utf-8")).digest()).decode("ascii")


def message_usage(input_tokens: int, output_tokens: int) -> dict:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def stop_reason(finish: FinishReason, stop_sequence: str | None, calls: int) -> str:
    if finish == FinishReason.LENGTH:
        return MAX_TOKENS
    if stop_sequence is not None:
        return STOP_SEQUENCE
    return TOOL_USE if calls else END_TURN


def tool_use_block(call: CallOut, call_id: str, arguments: dict) -> dict:
    return {"type": TOOL_USE_BLOCK, "id": call_id, "name": call.name, "input": arguments}


def message(header: docs.Header, content: list[dict], reason: str | None,
            sequence: str | None, usage: dict) -> dict:
    return {"id": message_id(header), "type": "message", "role": "assistant",
            "model": header.model, "content": content, "stop_reason": reason,
            "stop_sequence": sequence, "usage": usage}


def _outs(piece: Piece, tools_offered: bool) -> list[str | CallOut]:
    """The piece's answer, as text and calls in order."""
    return list(piece.parts) if tools_offered else ([piece.text] if piece.text else [])


class MessageDocument:
    """The whole `message`: the pieces collected, the document built at `finish`."""
    streamed = False

    def __init__(self, header: docs.Header, spec: GenSpec):
        self.header = header
        self.tools_offered = spec.tools is not None and spec.tools.offered
        self.reasoning: list[str] = []
        self.text: list[str] = []
        self.calls: list[CallOut] = []
        self.finish_reason, self.stop_sequence = FinishReason.STOP, None

    def piece(self, piece: Piece) -> bytes:
        self.reasoning.append(piece.reasoning)
        for out in _outs(piece, self.tools_offered):
            if isinstance(out, str):
                self.text.append(out)
            else:
                self.calls.append(out)
        if piece.finish is not None:
            self.finish_reason, self.stop_sequence = piece.finish, piece.stop_sequence
        return b""

    def finish(self, usage: dict) -> bytes:
        content = []
        thinking, text = "".join(self.reasoning), "".join(self.text)
        if thinking:
            content.append({"type": THINKING, "thinking": thinking, "signature": signature(thinking)})
        if text:
            content.append({"type": TEXT, "text": text})
        content += [tool_use_block(c, tool_use_id(), c.arguments) for c in self.calls]
        reason = stop_reason(self.finish_reason, self.stop_sequence, len(self.calls))
        return json_bytes(message(self.header, content, reason, self.stop_sequence,
                                  message_usage(usage["prompt_tokens"], usage["completion_tokens"])))

    def error(self, err: ApiError) -> bytes:
        return json_bytes(err.document(ErrorShape.ANTHROPIC))


def _event(name: str, document: dict) -> bytes:
    return event(json_bytes({"type": name, **document}), name)


class MessageEvents:
    """The message as Anthropic's SSE events; one content block is open at a time."""
    streamed = True

    def __init__(self, header: docs.Header, spec: GenSpec, input_tokens: int):
        self.header, self.input_tokens = header, input_tokens
        self.tools_offered = spec.tools is not None and spec.tools.offered
        self.started = False
        self.block: str | None = None           # the open block's type
        self.blocks = 0                         # blocks opened so far (the next one's index)
        self.thinking: list[str] = []           # the open thinking block's text (its signature)
        self.calls = 0
        self.finish_reason, self.stop_sequence = FinishReason.STOP, None

    def piece(self, piece: Piece) -> bytes:
        out = [] if self.started else self._start()
        if piece.reasoning:
            out += self._open(THINKING, {"thinking": "", "signature": ""})
            self.thinking.append(piece.reasoning)
            out.append(self._delta({"type": "thinking_delta", "thinking": piece.reasoning}))
        for part in _outs(piece, self.tools_offered):
            if isinstance(part, str):
                out += self._open(TEXT, {"text": ""})
                out.append(self._delta({"type": "text_delta", "text": part}))
            else:
                out += self._call(part)
        if piece.finish is not None:
            out += self._close()
            self.finish_reason, self.stop_sequence = piece.finish, piece.stop_sequence
        return b"".join(out)

    def finish(self, usage: dict) -> bytes:
        out = ([] if self.started else self._start()) + self._close()
        reason = stop_reason(self.finish_reason, self.stop_sequence, self.calls)
        out.append(_event("message_delta", {
            "delta": {"stop_reason": reason, "stop_sequence": self.stop_sequence},
            "usage": {"output_tokens": usage["completion_tokens"]}}))
        out.append(_event("message_stop", {}))
        return b"".join(out)

    def error(self, err: ApiError) -> bytes:
        return event(json_bytes(err.document(ErrorShape.ANTHROPIC)), "error")

    def _start(self) -> list[bytes]:
        self.started = True
        start = message(self.header, [], None, None, message_usage(self.input_tokens, 0))
        return [_event("message_start", {"message": start}), _event("ping", {})]

    def _open(self, kind: str, block: dict) -> list[bytes]:
        """Open a block of `kind` unless it is the open one (closing the one before)."""
        if self.block == kind and kind != TOOL_USE_BLOCK:
            return []
        out = self._close()
        self.block = kind
        out.append(_event("content_block_start", {"index": self.blocks,
                                                  "content_block": {"type": kind, **block}}))
        return out

    def _delta(self, delta: dict) -> bytes:
        return _event("content_block_delta", {"index": self.blocks, "delta": delta})

    def _call(self, call: CallOut) -> list[bytes]:
        self.calls += 1
        out = self._open(TOOL_USE_BLOCK, {"id": tool_use_id(), "name": call.name, "input": {}})
        out += [self._delta({"type": "input_json_delta", "partial_json": fragment})
                for fragment in argument_fragments(call.arguments_json)]
        return out + self._close()

    def _close(self) -> list[bytes]:
        if self.block is None:
            return []
        out = []
        if self.block == THINKING:
            text, self.thinking = "".join(self.thinking), []
            out.append(self._delta({"type": "signature_delta", "signature": signature(text)}))
        out.append(_event("content_block_stop", {"index": self.blocks}))
        self.block = None
        self.blocks += 1
        return out


def renderer(spec: GenSpec, header: docs.Header, input_tokens: int) -> Renderer:
    """Streamed events or the whole message (`input_tokens`: the prompt's, for message_start)."""
    return MessageEvents(header, spec, input_tokens) if spec.stream else MessageDocument(header, spec)
