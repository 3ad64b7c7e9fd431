"""Speculative decoding: its configuration check and the miss back-off.

What it is: a decoding sequence's row of a step may carry k drafted tokens after its last
token; the engine computes the last token plus the k drafts in ONE chunk of the batched
forward, giving k + 1 logit rows. The drafts come from the speculation policy
(engine/core/drafts/: grammar, prediction, suffix and prompt-lookup sources and the
draft-length rule).

Verification (`Scheduler.postprocess`) samples row j with the request's own stream at index
`num_generated + j`, exactly as plain decoding would, and keeps going while the sampled
token equals the draft. Because row j's logits only depend on accepted tokens, every
emitted token is the token plain decoding would have produced: greedy output is
identical, and seeded sampling is not merely distributionally exact but the very same
draw. Drafts cost nothing when rejected except their share of the step.

`check_config` is the one check of a `SpeculativeConfig` (the Engine runs it, the server's
config runs it at start-up); it raises `InvalidConfig` naming the field. `pause_after` is
the back-off of a sequence whose guessed drafts all missed: 1, 2, 4 ... up to
`SPEC_MAX_PAUSE_STEPS` steps without them (an accepted draft resets it).

What it is not: a draft model, or tree speculation.
"""
from __future__ import annotations

from numbers import Integral

from engine.errors import InvalidConfig
from engine.types import SPECULATIVE_METHODS, SpeculativeConfig

SPEC_MAX_PAUSE_STEPS = 32      # the longest pause of a sequence whose drafts keep missing


def pause_after(misses_in_a_row: int) -> int:
    """Steps without drafts after `misses_in_a_row` all-rejected verifications (1, 2, 4 ...)."""
    return min(2 ** (misses_in_a_row - 1), SPEC_MAX_PAUSE_STEPS) if misses_in_a_row > 0 else 0


# What each field must be, in words: the engine's messages and the server's config share them.
SPECULATIVE_RULES = {
    "method": " or ".join(f'"{method}"' for method in SPECULATIVE_METHODS),
    "num_speculative_tokens": "an integer >= 1",
    "prompt_lookup_min": "an integer >= 1",
    "prompt_lookup_max": "an integer >= 1",
}


def check_config(config: SpeculativeConfig) -> None:
    """The one check of a SpeculativeConfig: `InvalidConfig` naming `speculative.<field>`.

    Each field is checked on its own first (kind and range, in declaration order), then
    the pair: prompt_lookup_min <= prompt_lookup_max.
    """
    if config.method not in SPECULATIVE_METHODS:
        _refuse("method", config.method)
    for name in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"):
        value = getattr(config, name)
        if not _is_int(value) or value < 1:
            _refuse(name, value)
    if config.prompt_lookup_min > config.prompt_lookup_max:
        raise InvalidConfig("speculative.prompt_lookup_min", "must be <= prompt_lookup_max")


def _is_int(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _refuse(name: str, value: object) -> None:
    raise InvalidConfig(f"speculative.{name}", f"expected {SPECULATIVE_RULES[name]}, got {value!r}")
