"""The answers that take time: generations (streamed or not) and embeddings.

A generation is three small parts, read top to bottom:

1. `GenerationText` — engine events in, text `Piece`s out. It owns the `TextStream`
   (incremental UTF-8, stop strings), aborts the engine request when a stop string ends it,
   never sends the EOS token's text, makes the logprob entries, counts completion tokens
   and names the finish reason. A refusal, failure or expiry comes out as its `ApiError`.
2. A renderer per output shape — `ChatChunks`, `ChatDocument`, `CompletionChunks`,
   `CompletionDocument` — all with the same interface: `piece(Piece) -> bytes`,
   `finish(usage) -> bytes`, `error(ApiError) -> bytes`. Streamed ones return SSE bytes from
   every call; whole ones collect and return one JSON document from `finish`. A new shape
   (several choices, tool-call deltas, the Responses API's typed events) is a new renderer
   in `RENDERERS`, not a new branch.
3. `GenerationStream` — the thin `server.http.protocol.Stream` shell the loop polls whenever the
   engine thread wakes it, and at `next_deadline_s()` (SSE pings). It does head timing,
   pings and metrics. A streamed answer sends its `200` head with the first bytes (or the
   first ping), so a request that never got scheduled is still answered with a proper
   status (503, 500, 400); after the head an error can only travel as an SSE `error` event
   followed by `[DONE]`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from engine.api import FINISH_LENGTH, FINISH_STOP, TokenOut, Tokenizer
from server import documents as docs
from server.bridge import EmbedTicket, EngineBridge, Event, Ticket
from server.errors import ApiError
from server.openai import GenSpec
from server.documents import JSON_CONTENT_TYPE, json_bytes
from server.http.protocol import ResponseHead, StreamPoll
from sse import DONE, PING, TextStream, event

SSE_HEADERS = (("Content-Type", "text/event-stream; charset=utf-8"),
               ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"))


@dataclass(frozen=True, kw_only=True)
class StreamContext:
    """What a stream needs from the server, injected (no globals)."""
    bridge: EngineBridge
    tokenizer: Tokenizer
    ping_interval_s: float
    on_status: Callable[[str, int], None]     # (route, status) -> request counter
    on_finish: Callable[..., None]            # ServerMetrics.observe_generation


# ---- 1. engine events -> text pieces ---------------------------------------------------------

@dataclass(frozen=True)
class TokenLogprob:
    """One sampled token's logprobs, before an output shape is chosen."""
    text: str
    raw: bytes
    logprob: float
    top: tuple[tuple[str, bytes, float], ...]     # (text, bytes, logprob), best first


@dataclass(frozen=True)
class Piece:
    """Text that is safe to send, for one engine event; `finish` is set on the last piece."""
    text: str
    logprob: TokenLogprob | None = None
    finish: str | None = None


def _finish_reason(engine_finish: str | None) -> str:
    return FINISH_LENGTH if engine_finish == FINISH_LENGTH else FINISH_STOP


class GenerationText:
    """The text of one generation (one choice), one engine event at a time."""

    def __init__(self, *, tokenizer: Tokenizer, stop: tuple[str, ...], logprobs: bool,
                 top_logprobs: int, on_stop: Callable[[], None]):
        self._tokenizer = tokenizer
        self._text = TextStream(stop)
        self._logprobs, self._top_logprobs = logprobs, top_logprobs
        self._on_stop = on_stop                 # a stop string ends the request in the engine
        self.completion_tokens = 0

    def feed(self, ev: Event) -> Piece | ApiError:
        if not isinstance(ev, TokenOut):
            return ev.error()                   # refused, failed or expired
        if ev.token is None:                    # the finish alone (length, stop)
            return Piece(self._text.finish(), finish=_finish_reason(ev.finish))
        self.completion_tokens += 1
        is_stop_token = ev.finish == FINISH_STOP    # EOS / a stop id: its text is never sent
        raw = b"" if is_stop_token else self._tokenizer.token_bytes(ev.token)
        text = self._text.push(raw)
        finish = None
        if self._text.stopped():
            finish = FINISH_STOP
            self._on_stop()
        elif ev.finish is not None:
            text += self._text.finish()
            finish = _finish_reason(ev.finish)
        entry = None if (is_stop_token or not self._logprobs) else self._logprob(ev, raw)
        return Piece(text, entry, finish)

    def _logprob(self, ev: TokenOut, raw: bytes) -> TokenLogprob:
        def text_of(b: bytes) -> str:
            return b.decode("utf-8", errors="replace")
        top = []
        for token, logprob in ev.top_logprobs[:self._top_logprobs]:
            token_raw = self._tokenizer.token_bytes(token)
            top.append((text_of(token_raw), token_raw, logprob))
        return TokenLogprob(text_of(raw), raw, float(ev.logprob), tuple(top))


# ---- 2. renderers: one per output shape ------------------------------------------------------

class Renderer(Protocol):
    streamed: bool                # SSE bytes from every call, or one document at the end

    def piece(self, piece: Piece) -> bytes: ...

    def finish(self, usage: dict) -> bytes: ...

    def error(self, err: ApiError) -> bytes: ...


def _chat_entry(lp: TokenLogprob) -> dict:
    return docs.chat_logprob_entry(lp.text, lp.raw, lp.logprob, list(lp.top))


def _completion_entry(lp: TokenLogprob) -> tuple:
    return (lp.text, lp.logprob, list(lp.top))


class _SseRenderer:
    """Chunks as SSE events; the usage chunk when asked; `[DONE]` at the end."""
    streamed = True

    def __init__(self, header: docs.Header, spec: GenSpec):
        self.header, self.include_usage = header, spec.include_usage

    def piece(self, piece: Piece) -> bytes:
        return self._frame(self._chunk(piece))

    def finish(self, usage: dict) -> bytes:
        tail = self._frame(self._usage_chunk(usage)) if self.include_usage else b""
        return tail + DONE

    def error(self, err: ApiError) -> bytes:
        return event(json_bytes(err.document())) + DONE

    def _frame(self, chunk: dict) -> bytes:
        return event(json_bytes(chunk))

    def _chunk(self, piece: Piece) -> dict:
        raise NotImplementedError

    def _usage_chunk(self, usage: dict) -> dict:
        raise NotImplementedError


class ChatChunks(_SseRenderer):
    """chat.completion.chunk events; the first one carries the role."""

    def __init__(self, header: docs.Header, spec: GenSpec):
        super().__init__(header, spec)
        self._role_sent = False

    def _frame(self, chunk: dict) -> bytes:
        role = b""
        if not self._role_sent:
            self._role_sent = True
            role = super()._frame(docs.chat_chunk(self.header, {"role": "assistant",
                                                                "content": ""}))
        return role + super()._frame(chunk)

    def _chunk(self, piece: Piece) -> dict:
        entries = None if piece.logprob is None else [_chat_entry(piece.logprob)]
        return docs.chat_chunk(self.header, {"content": piece.text}, piece.finish, entries)

    def _usage_chunk(self, usage: dict) -> dict:
        return docs.chat_usage_chunk(self.header, usage)


class CompletionChunks(_SseRenderer):
    """text_completion events; logprobs' text_offset runs on across chunks, as in one answer."""

    def __init__(self, header: docs.Header, spec: GenSpec):
        super().__init__(header, spec)
        self._text_offset_chars = 0

    def _chunk(self, piece: Piece) -> dict:
        logprobs = None
        if piece.logprob is not None:
            logprobs = docs.completion_logprobs([_completion_entry(piece.logprob)],
                                                start_offset=self._text_offset_chars)
            self._text_offset_chars += len(piece.logprob.text)
        return docs.completion(self.header, piece.text, piece.finish, None, logprobs)

    def _usage_chunk(self, usage: dict) -> dict:
        return docs.completion_usage_chunk(self.header, usage)


class _WholeRenderer:
    """Collects the pieces; `finish` returns the one JSON document."""
    streamed = False

    def __init__(self, header: docs.Header, spec: GenSpec):
        self.header, self.logprobs = header, spec.logprobs
        self._parts: list[str] = []
        self._entries: list[TokenLogprob] = []
        self._finish = FINISH_STOP

    def piece(self, piece: Piece) -> bytes:
        self._parts.append(piece.text)
        if piece.logprob is not None:
            self._entries.append(piece.logprob)
        if piece.finish is not None:
            self._finish = piece.finish
        return b""

    def finish(self, usage: dict) -> bytes:
        return json_bytes(self._document("".join(self._parts), usage))

    def error(self, err: ApiError) -> bytes:
        return json_bytes(err.document())

    def _document(self, text: str, usage: dict) -> dict:
        raise NotImplementedError


class ChatDocument(_WholeRenderer):
    def _document(self, text: str, usage: dict) -> dict:
        entries = [_chat_entry(e) for e in self._entries] if self.logprobs else None
        return docs.chat_completion(self.header, text, self._finish, usage, entries)


class CompletionDocument(_WholeRenderer):
    def _document(self, text: str, usage: dict) -> dict:
        logprobs = None
        if self.logprobs:
            logprobs = docs.completion_logprobs([_completion_entry(e) for e in self._entries])
        return docs.completion(self.header, text, self._finish, usage, logprobs)


# (GenSpec.kind, GenSpec.stream) -> renderer class
RENDERERS: dict[tuple[str, bool], type] = {
    ("chat", True): ChatChunks, ("chat", False): ChatDocument,
    ("completion", True): CompletionChunks, ("completion", False): CompletionDocument,
}


def renderer_for(spec: GenSpec, header: docs.Header) -> Renderer:
    return RENDERERS[spec.kind, spec.stream](header, spec)


# ---- 3. the shell: head timing, pings, metrics ----------------------------------------------

class GenerationStream:
    """One chat or completion request, from admission to its last byte."""

    def __init__(self, *, ctx: StreamContext, ticket: Ticket, spec: GenSpec,
                 header: docs.Header, prompt_tokens: int, route: str,
                 headers: tuple[tuple[str, str], ...], arrival_s: float):
        self.ctx, self.ticket = ctx, ticket
        self.prompt_tokens, self.route, self.headers = prompt_tokens, route, headers
        self.arrival_s = arrival_s
        self.text = GenerationText(tokenizer=ctx.tokenizer, stop=spec.stop,
                                   logprobs=spec.logprobs, top_logprobs=spec.top_logprobs,
                                   on_stop=lambda: ctx.bridge.abort(ticket))
        self.render = renderer_for(spec, header)
        self.pending: list[bytes] = []          # bytes not yet handed to the loop
        self.head_sent = self.done = False
        self.last_send_s = arrival_s
        self.model_id, self.finish_reason, self.error_message = header.model, None, None

    def access_fields(self) -> dict:
        """What the access log (server/access.py) records of this generation."""
        first = self.ticket.first_token_s
        return {"model": self.model_id, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.text.completion_tokens,
                "finish_reason": self.finish_reason, "error": self.error_message,
                "ttft_ms": None if first is None else round((first - self.arrival_s) * 1000, 1)}

    def poll(self, now_s: float) -> StreamPoll:
        out = StreamPoll()
        if self.done:
            out.done = True
            return out
        ending = self._take_events()
        if isinstance(ending, ApiError):
            self._fail(out, ending)
        elif ending is not None:
            self._finish(out, now_s)
        elif self.render.streamed and (self.pending or now_s - self.last_send_s
                                       >= self.ctx.ping_interval_s):
            if not self.pending:
                self.pending.append(PING)
            self._send_sse(out, now_s)
        return out

    def next_deadline_s(self) -> float | None:
        if self.done or not self.render.streamed:
            return None
        return self.last_send_s + self.ctx.ping_interval_s

    def cancel(self) -> None:
        self.ctx.bridge.abort(self.ticket)
        self.done = True

    def _take_events(self) -> str | ApiError | None:
        """Render the events that arrived; the finish reason or error that ends it, if any."""
        events = self.ticket.events
        while events:
            result = self.text.feed(events.popleft())
            if isinstance(result, ApiError):
                return result
            data = self.render.piece(result)
            if data:
                self.pending.append(data)
            if result.finish is not None:
                self.finish_reason = result.finish
                return result.finish
        return None

    def _finish(self, out: StreamPoll, now_s: float) -> None:
        data = self.render.finish(docs.usage(self.prompt_tokens, self.text.completion_tokens))
        if self.render.streamed:
            self.pending.append(data)
            self._send_sse(out, now_s)
        else:
            self._whole(out, 200, data)
        self._observe(now_s)
        out.done = self.done = True

    def _fail(self, out: StreamPoll, err: ApiError) -> None:
        self.error_message = err.message
        if self.head_sent:                      # mid-stream: an SSE error event, then [DONE]
            self.pending.append(self.render.error(err))
            out.chunks, self.pending = self.pending, []
        else:                                   # a proper status response
            self._whole(out, err.status, json_bytes(err.document()), err.headers)
        self.ctx.bridge.abort(self.ticket)
        out.done = self.done = True

    def _whole(self, out: StreamPoll, status: int, body: bytes,
               extra: tuple[tuple[str, str], ...] = ()) -> None:
        out.head = ResponseHead(status=status, headers=(JSON_CONTENT_TYPE,) + extra + self.headers,
                                content_length=len(body))
        out.chunks = [body]
        self.head_sent = True
        self.ctx.on_status(self.route, status)

    def _send_sse(self, out: StreamPoll, now_s: float) -> None:
        if not self.head_sent:
            out.head = ResponseHead(status=200, headers=SSE_HEADERS + self.headers)
            self.head_sent = True
            self.ctx.on_status(self.route, 200)
        out.chunks, self.pending = self.pending, []
        self.last_send_s = now_s

    def _observe(self, now_s: float) -> None:
        t = self.ticket
        self.ctx.on_finish(
            prompt_tokens=self.prompt_tokens, completion_tokens=self.text.completion_tokens,
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

    def access_fields(self) -> dict:
        """What the access log (server/access.py) records of this request."""
        return {"model": self.model_id, "prompt_tokens": self.prompt_tokens,
                "error": self.ticket.error if self.ticket.done else None}

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
