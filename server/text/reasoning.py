"""Thinking kept apart: a model's `<think> … </think>` text split from its answer, as it streams.

Templates that think (Qwen3, DeepSeek-R1 style) make the model write its reasoning between
two tags before the answer. A client wants them apart: `reasoning_content` and a clean
`content`. The text arrives a few characters at a time, so a tag may be split across pieces
(`"<th"` then `"ink>"`); like stop strings in `sse/textstream.py`, the splitter holds back the
longest tail that could still become a tag and releases it once it cannot.

Three phases, one direction:

    START  --"<think>" (after optional whitespace)-->  REASONING  --"</think>"-->  ANSWER
      \\---- anything else: there is no thinking ---------------------------------^

A template that opens the tag itself (the prompt ends with `<think>`, DeepSeek-R1) starts in
REASONING. The newlines around the reasoning and at the start of the answer are dropped, as
Qwen3's own template drops them when it renders a past answer (`rstrip('\\n')`,
`lstrip('\\n')`), so an answer sent back in the history renders as the model first saw it.
A stream that ends inside REASONING (max_tokens) keeps what it wrote as reasoning.

Invariant, checked by the tests at every split point: the pieces joined equal the split of
the whole text at once.

Which requests are split (`request_thinking`): those to a template that thinks
(`template_thinks`, read from its text at start-up) unless the request turned thinking off;
the rendered prompt's end says whether the model starts inside the tag.
"""
from __future__ import annotations

from dataclasses import dataclass

from sse import partial_marker_chars

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
ENABLE_THINKING = "enable_thinking"     # the template variable that turns thinking off (Qwen3)

START, REASONING, ANSWER = "start", "reasoning", "answer"


@dataclass(frozen=True)
class ThinkTags:
    """The two tags around a model's reasoning."""
    open: str = THINK_OPEN
    close: str = THINK_CLOSE


@dataclass(frozen=True)
class Split:
    """Text safe to send now, by channel."""
    reasoning: str = ""
    content: str = ""

    def __add__(self, other: Split) -> Split:
        return Split(self.reasoning + other.reasoning, self.content + other.content)


class ReasoningSplitter:
    """Splits one generation's text into reasoning and answer, one piece at a time."""

    def __init__(self, tags: ThinkTags = ThinkTags(), *, starts_inside: bool = False):
        self._tags = tags
        self._phase = REASONING if starts_inside else START
        self._held = ""                 # text seen but not yet released
        self._reasoning_started = False  # leading newlines of the reasoning are dropped
        self._answer_started = False     # leading newlines of the answer are dropped

    @property
    def phase(self) -> str:
        return self._phase

    def push(self, text: str) -> Split:
        """Feed the next piece of generated text; returns what is safe to send."""
        self._held += text
        out = Split()
        while True:                     # until a pass leaves the phase as it was
            phase = self._phase
            out = out + self._advance()
            if self._phase == phase:
                return out

    def finish(self) -> Split:
        """The generation ended: release whatever was held back."""
        held, self._held = self._held, ""
        if self._phase == START:
            self._to_plain_answer()
            return self._answer(held)
        if self._phase == REASONING:
            return self._reasoning(held.rstrip("\n"))
        return self._answer(held)

    def _advance(self) -> Split:
        if self._phase == START:
            return self._advance_start()
        if self._phase == REASONING:
            return self._advance_reasoning()
        held, self._held = self._held, ""
        return self._answer(held)

    def _advance_start(self) -> Split:
        stripped = self._held.lstrip()
        if stripped.startswith(self._tags.open):
            self._held = stripped[len(self._tags.open):]
            self._phase = REASONING     # the caller loops on in the new phase
            return Split()
        if self._tags.open.startswith(stripped):
            return Split()              # still could be the opening tag: wait
        self._to_plain_answer()
        return Split()

    def _to_plain_answer(self) -> None:
        """No thinking: the answer is the text exactly as generated, nothing dropped."""
        self._phase = ANSWER
        self._answer_started = True

    def _advance_reasoning(self) -> Split:
        end = self._held.find(self._tags.close)
        if end >= 0:
            before, self._held = self._held[:end], self._held[end + len(self._tags.close):]
            self._phase = ANSWER
            return self._reasoning(before.rstrip("\n"))
        # Hold back a possible start of the closing tag and trailing newlines (they are
        # dropped if the tag follows them).
        keep = partial_marker_chars(self._held, (self._tags.close,))
        body = self._held[:len(self._held) - keep]
        safe = body.rstrip("\n")
        self._held = self._held[len(safe):]
        return self._reasoning(safe)

    def _reasoning(self, text: str) -> Split:
        if not self._reasoning_started:
            text = text.lstrip("\n")
            self._reasoning_started = bool(text)
        return Split(reasoning=text)

    def _answer(self, text: str) -> Split:
        if not self._answer_started:
            text = text.lstrip("\n")
            self._answer_started = bool(text)
        return Split(content=text)


# ---- when a request thinks --------------------------------------------------------------

@dataclass(frozen=True)
class Thinking:
    """One request's answer is split: the tags, and whether its prompt already opened them."""
    tags: ThinkTags = ThinkTags()
    starts_inside: bool = False

    def splitter(self) -> ReasoningSplitter:
        return ReasoningSplitter(self.tags, starts_inside=self.starts_inside)


def template_thinks(source: str, tags: ThinkTags = ThinkTags()) -> bool:
    """A chat template that makes its model think names the tag (Qwen3, DeepSeek-R1) or the
    switch (`enable_thinking`) somewhere in its text."""
    return tags.open in source or ENABLE_THINKING in source


def request_thinking(thinks: bool, prompt: str, variables: dict,
                     tags: ThinkTags = ThinkTags()) -> Thinking | None:
    """The split a request's answer gets, or None (the answer as generated): the served
    template thinks and the request did not turn it off (`enable_thinking: false`), or the
    rendered prompt ends inside an open tag (DeepSeek-R1 opens it whatever the request says)."""
    if not thinks:
        return None
    inside = prompt.rstrip().endswith(tags.open)
    if variables.get(ENABLE_THINKING) is False and not inside:
        return None
    return Thinking(tags, starts_inside=inside)
