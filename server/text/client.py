"""The API's one way to a chat model's engine: `EngineClient`, and the `Generation` it returns.

    client.generate(requests, rules, ...) -> Generation     chat, completions, Responses
    client.embed(inputs, encoding_format, ...) -> EmbedTicket   embeddings of a chat model
    client.forget_adapter(adapter)                           a LoRA adapter was unloaded
    client.served                                            the model as text (template,
                                                             tokenizer, length rules)

`generate` admits every choice's engine request or none of them (a 429 on a later choice
aborts the earlier ones) and gives each ticket its `ChoiceOutput`. On the engine thread,
right after every step, the bridge hands each ticket's events to `ChoiceOutput.take`
(server/worker/bridge.py):

    engine events -> GenerationText: UTF-8 and stop strings (`sse.TextStream`), logprob
                     entries, the finish reason, the reasoning split (server/text/
                     reasoning.py) -> `AnswerCalls` when tools are offered (content and
                     calls apart: server/text/toolparse.py) -> Piece
                     -> the generation's `pieces` deque                   (engine thread)
    the stream pops the pieces off `Generation.pieces` and renders them   (loop thread)

`take` answers True when the request must end now: a stop string matched, or a tool call
repeated an earlier one; the bridge aborts it before the next step, and nothing calls
back into the API. A refusal, failure or expiry arrives as the choice's `ApiError` and
ends the whole answer. `Generation.cancel` ends every choice (the client left, an error).
The API never touches a ticket, the bridge or an event: it renders pieces.

`GenerationText` never sends the EOS token's text and counts completion tokens; when the
answer thinks (`Thinking`) each piece carries the reasoning and the answer apart, so what
reads `Piece.text` (tool calls, JSON) sees the answer only; `Echo` is what `echo: true`
sends first. cli/generate.py runs `GenerationText` alone on an engine of its own.

The deque is the hand-off itself: one producer (the engine thread: every choice appends its
pieces in the order the steps made them, each naming its choice) and one consumer (the loop
thread); append and popleft are atomic under the GIL, and the counters are plain ints read
after.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Sequence

from engine.api import Finish, GenRequest, LoraAdapter, PromptLogprobs, TokenOut, Tokenizer
from server.errors import ApiError
from server.text.reasoning import Thinking
from server.text.served import ServedModel
from server.text.toolformats import ToolCallFormat
from server.text.toolparse import CallOut, CallSplitter, CallState
from server.worker.bridge import EngineBridge
from server.worker.embedding_jobs import EmbedTicket
from server.worker.events import Event
from server.worker.tickets import Ticket
from sse import TextStream


# ---- one choice's text: events -> pieces ----------------------------------------------------

class FinishReason(StrEnum):
    """A choice's `finish_reason` on the wire (a str: it serialises as its value)."""
    STOP = "stop"               # EOS, a stop id or a stop string
    LENGTH = "length"           # max_tokens or the context
    TOOL_CALLS = "tool_calls"   # the answer's calls are complete (chat documents)


@dataclass(frozen=True)
class TokenLogprob:
    """One token's logprobs, before an output shape is chosen. An echoed prompt's first
    token has none (`logprob` and `top` None: nothing precedes it)."""
    text: str
    raw: bytes
    logprob: float | None
    top: tuple[tuple[str, bytes, float], ...] | None  # (text, bytes, logprob), best first


@dataclass(frozen=True)
class Piece:
    """Text that is safe to send, for one engine event; `finish` is set on the last piece.
    `index` is the choice's; `prompt` holds an echoed prompt's scored tokens; `reasoning`
    the thinking text of the piece when the answer is split (`text` is then the answer's).
    With tools offered, `parts` is `text` split into content (str) and the calls it
    completes, in order, and `calls` how far the answer's calls have come. `stop_sequence`
    is the stop string that ended the answer, on its last piece."""
    text: str
    logprob: TokenLogprob | None = None
    finish: FinishReason | None = None
    index: int = 0
    prompt: tuple[TokenLogprob, ...] = ()
    reasoning: str = ""
    parts: tuple[str | CallOut, ...] = ()
    calls: CallState | None = None
    stop_sequence: str | None = None


@dataclass(frozen=True)
class Echo:
    """`echo: true`: the prompt's text goes first; with logprobs, its scores too."""
    text: str
    first_token: int                            # the scored prompt's unscored first token
    scored: bool                                # the engine scores the prompt (PromptLogprobs)


def _finish_reason(engine_finish: Finish | None) -> FinishReason:
    return FinishReason.LENGTH if engine_finish == Finish.LENGTH else FinishReason.STOP


class GenerationText:
    """The text of one generation (one choice), one engine event at a time."""

    def __init__(self, *, tokenizer: Tokenizer, stop: tuple[str, ...], logprobs: bool,
                 top_logprobs: int, index: int = 0, echo: Echo | None = None,
                 thinking: Thinking | None = None):
        self._tokenizer = tokenizer
        self._text = TextStream(stop)
        self._logprobs, self._top_logprobs = logprobs, top_logprobs
        self.index = index
        self._echo = echo                       # sent once, before the first completion text
        self._prompt: list[TokenLogprob] = []
        self._split = None if thinking is None else thinking.splitter()
        self.completion_tokens = 0
        # The engine's running prediction counts of this choice (else 0).
        self.accepted_prediction_tokens = self.rejected_prediction_tokens = 0

    def feed(self, ev: Event) -> Piece | ApiError | None:
        if isinstance(ev, PromptLogprobs):
            return self._scored_prompt(ev)
        if not isinstance(ev, TokenOut):
            return ev.error()                   # refused, failed or expired
        # running totals (engine/types.py): the latest is the request's, also when a stop
        # string ends it before the engine's finish
        self.accepted_prediction_tokens = max(self.accepted_prediction_tokens,
                                              ev.accepted_prediction_tokens)
        self.rejected_prediction_tokens = max(self.rejected_prediction_tokens,
                                              ev.rejected_prediction_tokens)
        if ev.token is None:                    # the finish alone (length, stop)
            return self._piece(self._text.finish(), None, _finish_reason(ev.finish))
        self.completion_tokens += 1
        is_stop_token = ev.finish == Finish.STOP    # EOS / a stop id: its text is never sent
        raw = b"" if is_stop_token else self._tokenizer.token_bytes(ev.token)
        text = self._text.push(raw)
        finish = None
        if self._text.stopped():
            finish = FinishReason.STOP          # the caller ends the engine request
        elif ev.finish is not None:
            text += self._text.finish()
            finish = _finish_reason(ev.finish)
        entry = None if (is_stop_token or not self._logprobs) else self._logprob(
            raw, ev.logprob, ev.top_logprobs)
        piece = self._piece(text, entry, finish)
        if self._text.stopped():                # which stop string (Anthropic's stop_sequence)
            piece = replace(piece, stop_sequence=self._text.matched)
        return piece

    @property
    def stopped(self) -> bool:
        """A stop string has ended the answer (the engine request must end too)."""
        return self._text.stopped()

    def _piece(self, text: str, entry: TokenLogprob | None, finish: str | None) -> Piece:
        if self._split is None:
            return Piece(self._echo_text() + text, entry, finish, self.index)
        split = self._split.push(text)
        if finish is not None:
            split = split + self._split.finish()
        return Piece(split.content, entry, finish, self.index, reasoning=split.reasoning)

    def _echo_text(self) -> str:
        text, self._echo = ("" if self._echo is None else self._echo.text), None
        return text

    def _scored_prompt(self, ev: PromptLogprobs) -> Piece | None:
        """Collect the prompt's scores; the echo (text and scores) once they are complete."""
        if self._echo is None or not self._echo.scored:
            return None
        if not self._prompt:
            raw = self._tokenizer.token_bytes(self._echo.first_token)
            self._prompt.append(TokenLogprob(_text_of(raw), raw, None, None))
        for token, logprob, top in zip(ev.tokens, ev.logprobs, ev.top_logprobs):
            self._prompt.append(self._logprob(self._tokenizer.token_bytes(token), logprob, top))
        if not ev.complete:
            return None
        return Piece(self._echo_text(), index=self.index, prompt=tuple(self._prompt))

    def _logprob(self, raw: bytes, logprob: float, top_ids) -> TokenLogprob:
        top = []
        for token, top_logprob in top_ids[:self._top_logprobs]:
            token_raw = self._tokenizer.token_bytes(token)
            top.append((_text_of(token_raw), token_raw, top_logprob))
        return TokenLogprob(_text_of(raw), raw, float(logprob), tuple(top))


def _text_of(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


# ---- a request's choices: the client, the Generation ---------------------------------------

@dataclass(frozen=True)
class CallRules:
    """Tools offered to the answer: the model's call syntax, whether calls may be several,
    whether the answer must be calls (`tool_choice` required or a named function)."""
    fmt: ToolCallFormat
    parallel: bool
    forced: bool = False


@dataclass(frozen=True)
class TextRules:
    """How a generation's tokens become text: the request's text-side settings."""
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    thinking: Thinking | None = None
    calls: CallRules | None = None          # tools offered: the answer is split into calls


class AnswerCalls:
    """A choice's answer split into content and calls as its pieces come (tools offered)."""

    def __init__(self, rules: CallRules, index: int = 0):
        self.index = index
        self.splitter = CallSplitter(rules.fmt, rules.parallel, rules.forced)

    def split(self, piece: Piece) -> tuple[Piece, bool]:
        """The piece with its answer split into `parts`; whether a call repeated an earlier
        one (the answer ends there: `ending` is its last piece)."""
        parts = self.splitter.push(piece.text)
        cut = self.splitter.cut and piece.finish is None
        if piece.finish is not None:
            parts += self.splitter.finish()
        return replace(piece, parts=tuple(parts), calls=self._state()), cut

    def ending(self) -> Piece:
        """The last piece of an answer a repeated call ended: a stop."""
        parts = self.splitter.push("") + self.splitter.finish()
        return Piece("", finish=FinishReason.STOP, index=self.index, parts=tuple(parts),
                     calls=self._state())

    def _state(self) -> CallState:
        return CallState(sent=self.splitter.sent, in_calls=self.splitter.in_calls)


class ChoiceOutput:
    """One choice's text, fed on the engine thread, taken on the loop thread."""

    def __init__(self, tokenizer: Tokenizer, rules: TextRules, index: int,
                 pieces: deque[Piece | ApiError], echo: Echo | None = None):
        self.index = index
        self.text = GenerationText(tokenizer=tokenizer, stop=rules.stop,
                                   logprobs=rules.logprobs, top_logprobs=rules.top_logprobs,
                                   index=index, echo=echo, thinking=rules.thinking)
        self.calls = None if rules.calls is None else AnswerCalls(rules.calls, index)
        self.pieces = pieces                    # the generation's: shared by its choices
        self.is_done = False                    # its last piece (or its error) is queued
        self.ticket: Ticket | None = None       # set by the client when it is admitted

    def take(self, events: deque[Event]) -> bool:
        """The engine thread's turn: events -> pieces; True: end the request now."""
        ends = False
        while events:
            event = events.popleft()
            if self.is_done:
                continue                        # after a stop string: the engine's leftovers
            result = self.text.feed(event)
            if isinstance(result, ApiError):
                self.pieces.append(result)
                self.is_done = True
                return True
            if result is None:
                continue
            if self.calls is not None:
                result, cut = self.calls.split(result)
                if cut:                         # a repeated call: the answer ends here
                    self.pieces.append(result)
                    result, ends = self.calls.ending(), True
            ends = ends or self.text.stopped
            self.pieces.append(result)
            if result.finish is not None:
                self.is_done = True
        return ends


class Generation:
    """The choices of one request, their pieces, and the way to end them. `pieces` is the
    hand-off: the engine thread appends, the stream pops (`popleft`) on the loop thread."""

    def __init__(self, choices: list[ChoiceOutput], bridge: EngineBridge,
                 pieces: deque[Piece | ApiError]):
        self.choices = choices
        self.pieces = pieces
        self._bridge = bridge

    @property
    def first(self) -> Ticket:
        """The first choice's ticket: its timings are the request's (metrics, access log)."""
        return self.choices[0].ticket

    def cancel(self) -> None:
        """End every choice in the engine (a no-op for those already ended)."""
        for choice in self.choices:
            self._bridge.abort(choice.ticket)

    @property
    def completion_tokens(self) -> int:
        return sum(choice.text.completion_tokens for choice in self.choices)

    @property
    def accepted_prediction_tokens(self) -> int:
        return sum(choice.text.accepted_prediction_tokens for choice in self.choices)

    @property
    def rejected_prediction_tokens(self) -> int:
        return sum(choice.text.rejected_prediction_tokens for choice in self.choices)


def choice_outputs(tokenizer: Tokenizer, rules: TextRules, count: int,
                   pieces: deque[Piece | ApiError],
                   echoes: Sequence[Echo | None] | None = None) -> list[ChoiceOutput]:
    return [ChoiceOutput(tokenizer, rules, index, pieces, echoes[index] if echoes else None)
            for index in range(count)]


class EngineClient:
    """One chat model: its text layer and its engine thread, behind three calls."""

    def __init__(self, served: ServedModel, bridge: EngineBridge):
        self.served = served
        self._bridge = bridge

    @property
    def model_id(self) -> str:
        return self.served.id

    def generate(self, requests: Sequence[GenRequest], rules: TextRules, *,
                 request_id: str = "", echoes: Sequence[Echo | None] | None = None) -> Generation:
        """One engine request per choice, admitted together (any thread: admission and the
        engine's inbox are thread-safe): the whole answer or none of it. Raises the refusal
        (429, 500 engine down) unchanged."""
        pieces: deque[Piece | ApiError] = deque()
        choices = choice_outputs(self.served.tokenizer, rules, len(requests), pieces, echoes)
        generation = Generation(choices, self._bridge, pieces)
        admitted = []
        try:
            for request, choice in zip(requests, choices):
                choice.ticket = self._bridge.submit(request, request_id=request_id,
                                                    output=choice)
                admitted.append(choice.ticket)
        except ApiError:
            for ticket in admitted:
                self._bridge.abort(ticket)
            raise
        return generation

    def embed(self, inputs: list[list[int]], encoding_format: str, *,
              request_id: str = "") -> EmbedTicket:
        """An embeddings call on this model's engine (admitted like a generation)."""
        return self._bridge.embed(inputs, encoding_format, request_id=request_id)

    def forget_adapter(self, adapter: LoraAdapter) -> None:
        """The adapter was unloaded: the engine frees its merged weights (any thread)."""
        self._bridge.forget_adapter(adapter)
