"""The values a generation's text travels in, from `GenerationText` to the renderers.

An engine event becomes a `Piece` of safe text (server/streams.py); every renderer, of
every API's output shape (server/streams.py, server/toolcalls.py, server/responses.py),
takes `Piece`s. `TokenLogprob` is one token's scores before a shape is chosen; `Echo` is
the prompt a completion repeats first.
"""
from __future__ import annotations

from dataclasses import dataclass


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
    `index` is the choice's; `prompt` holds an echoed prompt's scored tokens."""
    text: str
    logprob: TokenLogprob | None = None
    finish: str | None = None
    index: int = 0
    prompt: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Echo:
    """`echo: true`: the prompt's text goes first; with logprobs, its scores too."""
    text: str
    first_token: int                            # the scored prompt's unscored first token
    scored: bool                                # the engine scores the prompt (PromptLogprobs)
