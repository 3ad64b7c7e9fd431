"""The answers that take time: generations (streamed or not) and embeddings.

Each is a `server.protocol.Stream`: the loop thread polls it whenever the engine thread
wakes the loop, and at `next_deadline_s()` (SSE pings). Polling drains the request's event
deque, runs the token bytes through `TextStream` (incremental UTF-8, stop strings), and
turns them into SSE chunks — or, for a plain request, into one JSON document at the end.

Head timing: a streamed answer sends its `200` head with the first event (or the first
ping), so a request that never got scheduled can still be answered with a proper
429/503 status. After the head, an error can only travel as an SSE `error` event.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from engine.api import FINISH_LENGTH, FINISH_STOP, TokenOut
from server import documents as docs
from server.bridge import EmbedTicket, Ticket
from server.errors import ApiError
from server.openai import GenSpec
from server.protocol import JSON_CONTENT_TYPE, ResponseHead, StreamPoll, json_bytes
from sse import DONE, PING, TextStream, event

SSE_HEADERS = (("Content-Type", "text/event-stream; charset=utf-8"),
               ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"))


@dataclass(frozen=True, kw_only=True)
class StreamContext:
    """What a stream needs from the server, injected (no globals)."""
    bridge: Any                               # EngineBridge
    tokenizer: Any
    ping_interval_s: float
    on_status: Callable[[str, int], None]     # (route, status) -> request counter
    on_finish: Callable[..., None]            # ServerMetrics.observe_generation


class GenerationStream:
    """One chat or completion request, from admission to its last byte."""

    def __init__(self, *, ctx: StreamContext, ticket: Ticket, spec: GenSpec,
                 header: docs.Header, prompt_tokens: int, route: str,
                 headers: tuple[tuple[str, str], ...], arrival_s: float):
        self.ctx, self.ticket, self.spec, self.header = ctx, ticket, spec, header
        self.prompt_tokens, self.route, self.headers = prompt_tokens, route, headers
        self.arrival_s = arrival_s
        self.text = TextStream(spec.stop)
        self.completion_tokens = 0
        self.parts: list[str] = []            # non-streamed text pieces
        self.logprobs: list = []              # non-streamed logprob entries
        self.text_offset = 0                  # streamed completions: chars of tokens so far
        self.pending: list[bytes] = []        # streamed bytes not yet handed to the loop
        self.finish: str | None = None
        self.error: ApiError | None = None
        self.head_sent = False
        self.role_sent = False                # chat: the first chunk carries the role
        self.done = False
        self.last_send_s = arrival_s
        self.is_chat = spec.kind == "chat"

    # -- Stream protocol ---------------------------------------------------------------

    def poll(self, now_s: float) -> StreamPoll:
        out = StreamPoll()
        if self.done:
            out.done = True
            return out
        events = self.ticket.events
        while events and self.finish is None and self.error is None:
            self._on_event(events.popleft())
        if self.error is not None:
            self._end_with_error(out)
        elif self.finish is not None:
            self._end(out, now_s)
        elif self.spec.stream and (self.pending or now_s - self.last_send_s
                                   >= self.ctx.ping_interval_s):
            if not self.pending:
                self.pending.append(PING)
            self._send_stream_bytes(out, now_s)
        return out

    def next_deadline_s(self) -> float | None:
        if self.done or not self.spec.stream:
            return None
        return self.last_send_s + self.ctx.ping_interval_s

    def cancel(self) -> None:
        self.ctx.bridge.abort(self.ticket)
        self.done = True

    # -- events -> text ----------------------------------------------------------------

    def _on_event(self, ev) -> None:
        if not isinstance(ev, TokenOut):
            self.error = ev.error()                     # refused, failed or expired
            return
        if ev.token is None:
            self.finish = FINISH_LENGTH if ev.finish == FINISH_LENGTH else FINISH_STOP
            self._emit(self.text.finish(), None)
            return
        self.completion_tokens += 1
        is_stop_token = ev.finish == FINISH_STOP      # EOS / a stop id: its text is never sent
        raw = b"" if is_stop_token else self.ctx.tokenizer.token_bytes(ev.token)
        piece = self.text.push(raw)
        finish = None
        if self.text.stopped():
            finish = FINISH_STOP
            self.ctx.bridge.abort(self.ticket)          # the stop string ends it in the engine
        elif ev.finish is not None:
            piece += self.text.finish()
            finish = FINISH_LENGTH if ev.finish == FINISH_LENGTH else FINISH_STOP
        entry = None if (is_stop_token or not self.spec.logprobs) else self._logprob(ev, raw)
        self.finish = finish
        self._emit(piece, entry)

    def _logprob(self, ev: TokenOut, raw: bytes):
        tok = self.ctx.tokenizer
        text = raw.decode("utf-8", errors="replace")
        top = [(tok.token_bytes(t).decode("utf-8", errors="replace"), tok.token_bytes(t), lp)
               for t, lp in ev.top_logprobs[:self.spec.top_logprobs]]
        if self.is_chat:
            return docs.chat_logprob_entry(text, raw, float(ev.logprob), top)
        return (text, float(ev.logprob), top)

    def _emit(self, piece: str, entry) -> None:
        if not self.spec.stream:
            self.parts.append(piece)
            if entry is not None:
                self.logprobs.append(entry)
            return
        if self.is_chat:
            chunk = docs.chat_chunk(self.header, {"content": piece}, self.finish,
                                    None if entry is None else [entry])
        else:
            lp = None
            if entry is not None:      # text_offset runs on across chunks, as in one answer
                lp = docs.completion_logprobs([entry], start_offset=self.text_offset)
                self.text_offset += len(entry[0])
            chunk = docs.completion(self.header, piece, self.finish, None, lp)
        self._queue_chunk(chunk)

    def _queue_chunk(self, chunk: dict) -> None:
        if not self.role_sent and self.is_chat:
            role = docs.chat_chunk(self.header, {"role": "assistant", "content": ""})
            self.pending.append(event(json_bytes(role)))
            self.role_sent = True
        self.pending.append(event(json_bytes(chunk)))

    # -- endings -------------------------------------------------------------------------

    def _usage(self) -> dict:
        return docs.usage(self.prompt_tokens, self.completion_tokens)

    def _end(self, out: StreamPoll, now_s: float) -> None:
        if self.spec.stream:
            if self.spec.include_usage:
                make = docs.chat_usage_chunk if self.is_chat else docs.completion_usage_chunk
                self._queue_chunk(make(self.header, self._usage()))
            self.pending.append(DONE)
            self._send_stream_bytes(out, now_s)
        else:
            text = "".join(self.parts)
            if self.is_chat:
                doc = docs.chat_completion(self.header, text, self.finish, self._usage(),
                                           self.logprobs if self.spec.logprobs else None)
            else:
                lp = docs.completion_logprobs(self.logprobs) if self.spec.logprobs else None
                doc = docs.completion(self.header, text, self.finish, self._usage(), lp)
            self._whole(out, 200, json_bytes(doc))
        self._observe(now_s)
        out.done = self.done = True

    def _end_with_error(self, out: StreamPoll) -> None:
        if self.head_sent:
            self.pending += [event(json_bytes(self.error.document())), DONE]
            out.chunks, self.pending = self.pending, []
        else:
            self._whole(out, self.error.status, json_bytes(self.error.document()),
                        self.error.headers)
        self.ctx.bridge.abort(self.ticket)
        out.done = self.done = True

    def _whole(self, out: StreamPoll, status: int, body: bytes,
               extra: tuple[tuple[str, str], ...] = ()) -> None:
        out.head = ResponseHead(status=status, headers=(JSON_CONTENT_TYPE,) + extra + self.headers,
                                content_length=len(body))
        out.chunks = [body]
        self.head_sent = True
        self.ctx.on_status(self.route, status)

    def _send_stream_bytes(self, out: StreamPoll, now_s: float) -> None:
        if not self.head_sent:
            out.head = ResponseHead(status=200, headers=SSE_HEADERS + self.headers)
            self.head_sent = True
            self.ctx.on_status(self.route, 200)
        out.chunks, self.pending = self.pending, []
        self.last_send_s = now_s

    def _observe(self, now_s: float) -> None:
        t = self.ticket
        self.ctx.on_finish(
            prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
            ttft_s=None if t.first_token_s is None else t.first_token_s - self.arrival_s,
            e2e_s=(t.last_token_s or now_s) - self.arrival_s,
            queue_s=None if t.scheduled_s is None else max(0.0, t.scheduled_s - self.arrival_s))


class EmbedStream:
    """Waits for the engine thread to run the inputs between steps, then answers once."""

    def __init__(self, *, ticket: EmbedTicket, model_id: str, prompt_tokens: int,
                 headers: tuple[tuple[str, str], ...], on_status: Callable[[str, int], None]):
        self.ticket, self.model_id, self.prompt_tokens = ticket, model_id, prompt_tokens
        self.headers, self.on_status = headers, on_status
        self.done = False

    def poll(self, now_s: float) -> StreamPoll:
        out = StreamPoll()
        if self.done or not self.ticket.done:
            out.done = self.done
            return out
        if self.ticket.error is not None:
            err = ApiError("internal_error", self.ticket.error)
            status, body = err.status, json_bytes(err.document())
        else:
            doc = docs.embeddings(self.model_id, self.ticket.result, self.prompt_tokens)
            status, body = 200, json_bytes(doc)
        out.head = ResponseHead(status=status, headers=(JSON_CONTENT_TYPE,) + self.headers,
                                content_length=len(body))
        out.chunks = [body]
        out.done = self.done = True
        self.on_status("embeddings", status)
        return out

    def next_deadline_s(self) -> float | None:
        return None

    def cancel(self) -> None:
        self.done = True
