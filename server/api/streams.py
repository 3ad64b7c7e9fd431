"""The answers that take time: generations, streamed or not (embeddings: server/api/embeddings.py).

A generation is three small parts, read top to bottom:

1. The `Generation` (server/text/client.py, returned by the model's `EngineClient`) —
   its choices' text as `Piece`s, made on the engine thread right after each step: UTF-8,
   stop strings, logprob entries, reasoning and tool calls apart, the finish reason; a
   refusal comes out as its `ApiError`. A stop string or a repeated tool call ends its
   engine request there (the engine thread aborts it); the shell only renders.
2. A renderer per output shape, each in its endpoint's module (server/api/chat/render.py,
   server/api/completions.py, server/api/responses/render.py), all with the `Renderer`
   interface: `piece(Piece) -> bytes`, `finish(usage) -> bytes`, `error(ApiError) -> bytes`.
   Streamed ones return SSE bytes from every call, each a whole object of its endpoint's
   module (the frames from `sse/`); whole ones collect and return one JSON document from
   `finish` (their shared base `WholeRenderer`, below). The endpoint chooses its renderer
   and hands it in; the shell never chooses.
3. `GenerationStream` — the thin `server.http.protocol.Stream` shell the loop polls when the
   engine thread has given it pieces (`has_output`), and at `next_deadline_s()` (SSE pings). It does head timing,
   pings and metrics; a large whole document (many logprobs) is built off the loop
   (server/offloop/pool.py) and sent when ready. A streamed answer sends its `200` head with
   its first bytes, and only once the engine has scheduled it (its first token); pings
   keep a quiet stream alive only after that. So a request is refused before its head (503 past the queue
   deadline, 500, 400: statuses a client can retry or read) or served to its end: waiting
   behind running sequences never turns into an error inside an accepted stream. After
   the head an error (an engine fault) can only travel as an SSE `error` event + `[DONE]`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Protocol

from server.api import documents as docs
from server.errors import ApiError, ErrorShape
from server.text.client import FinishReason, Generation, Piece, TokenLogprob
from server.api.generation import GenSpec
from server.api.prediction import prediction_usage
from server.replies import JSON_CONTENT_TYPE, json_bytes, json_bytes_piecewise
from server.http.protocol import Response, ResponseHead, Stream, StreamPoll
from server.observe.vllm_metrics import FinishedRequest
from server.offloop.pool import Inline, OffLoop, Outcome
from sse import PING

SSE_HEADERS = (("Content-Type", "text/event-stream; charset=utf-8"),
               ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"))
# A whole document with more logprob entries than this (tokens x (1 + top_logprobs)) is
# built off the loop: each entry is a dict with a byte list, ~10 us of JSON.
INLINE_DOCUMENT_MAX_ENTRIES = 512


@dataclass(frozen=True, kw_only=True)
class StreamContext:
    """What a stream needs from the server, injected (no globals); one for the server."""
    ping_interval_s: float
    on_status: Callable[..., None]            # (route, status, model=) -> request counter
    on_finish: Callable[[FinishedRequest], None]   # ServerMetrics.observe_generation
    offloop: OffLoop = Inline()               # where a large whole document is built


# ---- 2. the renderers' interface and the base of the whole ones ----------------------------------------

class Renderer(Protocol):
    streamed: bool                # SSE bytes from every call, or one document at the end

    def piece(self, piece: Piece) -> bytes: ...

    def finish(self, usage: dict) -> bytes: ...

    def error(self, err: ApiError) -> bytes: ...


@dataclass
class Collected:
    """One choice's pieces, for a whole document."""
    parts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)      # when the answer thinks
    entries: list[TokenLogprob] = field(default_factory=list)
    finish: FinishReason = FinishReason.STOP


class WholeRenderer:
    """Collects each choice's pieces; `finish` returns the one JSON document."""
    streamed = False

    def __init__(self, header: docs.Header, spec: GenSpec):
        self.header, self.logprobs = header, spec.logprobs
        self.thinks = spec.thinking is not None        # the document names the reasoning
        self._choices: dict[int, Collected] = {}

    def piece(self, piece: Piece) -> bytes:
        choice = self._choices.setdefault(piece.index, Collected())
        choice.parts.append(piece.text)
        choice.reasoning.append(piece.reasoning)
        choice.entries.extend(piece.prompt)
        if piece.logprob is not None:
            choice.entries.append(piece.logprob)
        if piece.finish is not None:
            choice.finish = piece.finish
        return b""

    def finish(self, usage: dict) -> bytes:        # piecewise: may run off the loop, large
        return json_bytes_piecewise(docs.merge_choices([
            self._document(index, "".join(c.parts), c, usage)
            for index, c in sorted(self._choices.items())]))

    def error(self, err: ApiError) -> bytes:
        return json_bytes(err.document())

    def _document(self, index: int, text: str, choice: Collected, usage: dict) -> dict:
        raise NotImplementedError


# ---- 3. the shell: head timing, pings, metrics ----------------------------------------------

class GenerationStream:
    """One chat or completion request (one or more choices), from admission to its last byte."""

    def __init__(self, *, ctx: StreamContext, generation: Generation, spec: GenSpec,
                 header: docs.Header, prompt_tokens: int, route: str,
                 headers: tuple[tuple[str, str], ...], arrival_s: float,
                 renderer: Renderer, errors: ErrorShape = ErrorShape.OPENAI):
        self.ctx = ctx
        self.generation = generation
        self.prompt_tokens, self.route, self.headers = prompt_tokens, route, headers
        self.arrival_s = arrival_s
        self.render = renderer                  # the endpoint's choice (server/api/launch.py)
        self.errors = errors                    # the error document before the head
        self.choices_left = len(generation.choices)
        self.entries_per_token = 1 + spec.top_logprobs if spec.logprobs else 0
        self.echoed_tokens = prompt_tokens * spec.n if spec.echo and spec.logprobs else 0
        self.tail: Stream | None = None         # the whole document, being built off the loop
        self.pending: list[bytes] = []          # bytes not yet handed to the loop
        self.head_sent = self.done = False
        self.last_send_s = arrival_s
        self.model_id, self.finish_reason, self.error_message = header.model, None, None
        self.predicted = spec.prediction is not None    # usage reports the prediction's tokens

    def access_fields(self) -> dict:
        """What the access log (server/door/access.py) records of this generation."""
        first = self.generation.first.first_token_s
        return {"model": self.model_id, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "finish_reason": self.finish_reason, "error": self.error_message,
                "ttft_ms": None if first is None else round((first - self.arrival_s) * 1000, 1)}

    def has_output(self) -> bool:
        """Pieces to render, or a built document to send: the loop polls us on a wake."""
        if self.tail is not None:
            return self.tail.has_output()
        return self.done or bool(self.generation.pieces)

    def poll(self, now_s: float) -> StreamPoll:
        if self.tail is not None:
            return self.tail.poll(now_s)
        out = StreamPoll()
        if self.done:
            out.done = True
            return out
        ending = self._render_pieces()
        if isinstance(ending, ApiError):
            self._fail(out, ending)
        elif ending:
            self._finish(out, now_s)
        elif self.render.streamed and (self.pending or self._ping_due(now_s)):
            if not self.pending:
                self.pending.append(PING)
            self._send_sse(out, now_s)
        return out

    def next_deadline_s(self) -> float | None:
        if self.tail is not None:
            return self.tail.next_deadline_s()
        if self.done or not self.render.streamed or not self._is_scheduled():
            return None
        return self.last_send_s + self.ctx.ping_interval_s

    def _is_scheduled(self) -> bool:
        """The engine has produced a token (any choice's): the head may go out, pings follow."""
        return self.completion_tokens > 0

    def _ping_due(self, now_s: float) -> bool:
        return self._is_scheduled() and now_s - self.last_send_s >= self.ctx.ping_interval_s

    def cancel(self) -> None:
        self.generation.cancel()
        if self.tail is not None:
            self.tail.cancel()
        self.done = True

    def _render_pieces(self) -> bool | ApiError:
        """Render the pieces that arrived; True when every choice has finished, or the
        error that ends the whole answer."""
        pieces = self.generation.pieces             # the engine thread appends to it
        while pieces:
            piece = pieces.popleft()
            if isinstance(piece, ApiError):
                return piece
            data = self.render.piece(piece)
            if data:
                self.pending.append(data)
            if piece.finish is not None:
                self.choices_left -= 1
                self.finish_reason = piece.finish
        return self.choices_left == 0

    @property
    def completion_tokens(self) -> int:
        return self.generation.completion_tokens

    def _usage(self) -> dict:
        """The answer's usage; with a prediction, its accepted and rejected tokens summed
        over the choices (each from its engine request's finish)."""
        details = None
        if self.predicted:
            details = prediction_usage(self.generation.accepted_prediction_tokens,
                                       self.generation.rejected_prediction_tokens)
        return docs.usage(self.prompt_tokens, self.completion_tokens, details)

    def _finish(self, out: StreamPoll, now_s: float) -> None:
        usage = self._usage()
        if self.render.streamed:
            self.pending.append(self.render.finish(usage))
            self._send_sse(out, now_s)
        elif self._document_entries() > INLINE_DOCUMENT_MAX_ENTRIES:
            self.tail = self.ctx.offloop.run(partial(self.render.finish, usage),
                                             partial(self._document_built, now_s))
            return                              # the tail answers once the document is built
        else:
            self._whole(out, 200, self.render.finish(usage))
        self._observe(now_s)
        out.done = self.done = True

    def _document_entries(self) -> int:
        """The logprob entries of the whole document (an echoed prompt's scores included)."""
        return (self.completion_tokens + self.echoed_tokens) * self.entries_per_token

    def _document_built(self, now_s: float, body: Outcome) -> Response:
        """Back on the loop thread with the whole document built off it."""
        self.head_sent = self.done = True
        self._count(200)
        self._observe(now_s)
        return Response(status=200, headers=(JSON_CONTENT_TYPE,) + self.headers,
                        body=body.get())

    def _fail(self, out: StreamPoll, err: ApiError) -> None:
        self.error_message = err.message
        if self.head_sent:                      # mid-stream: an SSE error event, then [DONE]
            self.pending.append(self.render.error(err))
            out.chunks, self.pending = self.pending, []
        else:                                   # a proper status response
            self._whole(out, err.status_in(self.errors), json_bytes(err.document(self.errors)),
                        err.headers)
        self.generation.cancel()
        out.done = self.done = True

    def _whole(self, out: StreamPoll, status: int, body: bytes,
               extra: tuple[tuple[str, str], ...] = ()) -> None:
        out.head = ResponseHead(status=status, headers=(JSON_CONTENT_TYPE,) + extra + self.headers,
                                content_length=len(body))
        out.chunks = [body]
        self.head_sent = True
        self._count(status)

    def _send_sse(self, out: StreamPoll, now_s: float) -> None:
        if not self.head_sent:
            out.head = ResponseHead(status=200, headers=SSE_HEADERS + self.headers)
            self.head_sent = True
            self._count(200)
        out.chunks, self.pending = self.pending, []
        self.last_send_s = now_s

    def _count(self, status: int) -> None:
        self.ctx.on_status(self.route, status, model=self.model_id)

    def _observe(self, now_s: float) -> None:
        """The finished generation's timings (its first choice's), for /metrics."""
        t = self.generation.first
        last_s = t.last_token_s or now_s
        self.ctx.on_finish(FinishedRequest(
            model=self.model_id, prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens, finish_reason=self.finish_reason,
            e2e_s=last_s - self.arrival_s,
            ttft_s=None if t.first_token_s is None else t.first_token_s - self.arrival_s,
            queue_s=None if t.started_s is None else max(0.0, t.started_s - self.arrival_s),
            prefill_s=(None if t.started_s is None or t.first_token_s is None
                       else t.first_token_s - t.started_s),
            decode_s=None if t.first_token_s is None else last_s - t.first_token_s,
            token_gaps_s=tuple(t.token_gaps_s)))
