"""Engine events in, text `Piece`s out: the text of one generation, for every output shape.

`GenerationText` owns the `TextStream` (incremental UTF-8, stop strings), says when a stop
string has ended the answer (`stopped`: the caller ends the engine request), never sends
the EOS token's text, makes the logprob entries (`TokenLogprob`), counts completion tokens
and names the finish reason (`FinishReason`, the wire's). A refusal, failure or expiry
comes out as its `ApiError`. When the answer thinks (`Thinking`,
server/text/reasoning.py) its text runs through a `ReasoningSplitter`: each piece carries
the reasoning and the answer apart, so what reads `Piece.text` (tool calls, JSON) sees the
answer only. server/text/client.py runs it for each choice on the engine thread; the
renderers of server/api/ consume its `Piece`s; `Echo` is what `echo: true` sends first.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from engine.api import Finish, PromptLogprobs, TokenOut, Tokenizer
from server.worker.events import Event
from server.errors import ApiError
from server.text.reasoning import Thinking
from server.text.toolparse import CallOut, CallState
from sse import TextStream


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
    completes, in order, and `calls` how far the answer's calls have come."""
    text: str
    logprob: TokenLogprob | None = None
    finish: FinishReason | None = None
    index: int = 0
    prompt: tuple[TokenLogprob, ...] = ()
    reasoning: str = ""
    parts: tuple[str | CallOut, ...] = ()
    calls: CallState | None = None


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
        return self._piece(text, entry, finish)

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
