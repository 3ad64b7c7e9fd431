"""Prompt-lookup speculative decoding: drafts from the request's own context.

What it is: when a model repeats or edits text it was given (summaries that quote, code
edits, "repeat this passage"), the next tokens often already appear in the context right
after the current last few tokens. `propose` finds the most recent earlier occurrence of
the context's last n-gram (n from `prompt_lookup_max` down to `prompt_lookup_min`) and
proposes the tokens that followed it. The engine then computes the last token plus the k
drafts in ONE chunk of the batched forward, giving k + 1 logit rows.

Verification (`engine.core.engine`) samples row j with the request's own stream at index
`num_generated + j`, exactly as plain decoding would, and keeps going while the sampled
token equals the draft. Because row j's logits only depend on accepted tokens, every
emitted token is the token plain decoding would have produced: greedy output is
identical, and seeded sampling is not merely distributionally exact but the very same
draw. Drafts cost nothing when rejected except their share of the step.

`check_config` is the one check of a `SpeculativeConfig` (the Engine runs it, the server's
config runs it at start-up); it raises `InvalidConfig` naming the field.

Where it is free: drafts are extra rows of a step. A step of a few rows is bound by
reading the weights, so a few more rows cost little; a step of many rows is bound by
arithmetic, so every draft row costs its full share. Two guards keep speculation to the
first case: no drafts while more than `SPEC_MAX_DECODING` sequences decode (the scheduler),
and a sequence whose drafts were all rejected pauses drafting for 1, 2, 4 ... up to
`SPEC_MAX_PAUSE_STEPS` steps (`pause_after`; an accepted draft resets it), so ordinary chat,
where few drafts hit, pays for few of them. Neither guard changes an output.

What it is not: a draft model, or tree speculation.
"""
from __future__ import annotations

from numbers import Integral

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engine.errors import InvalidConfig
from engine.types import SPECULATIVE_METHODS, SpeculativeConfig

SPEC_MAX_DECODING = 8          # more decoding sequences than this: the step is compute-bound, no drafts
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


def propose(tokens: list[int], config: SpeculativeConfig, max_draft: int) -> list[int]:
    """Up to `max_draft` tokens that followed the latest earlier match of the last n-gram."""
    max_draft = min(max_draft, config.num_speculative_tokens)
    if max_draft <= 0:
        return []
    context = np.asarray(tokens, dtype=np.int64)                           # [T]
    total = context.shape[0]
    for n in range(config.prompt_lookup_max, config.prompt_lookup_min - 1, -1):
        if total <= n:
            continue
        windows = sliding_window_view(context[:total - 1], n)                # [T-n, n]: starts 0..T-n-1
        hits = np.flatnonzero((windows == context[total - n:]).all(axis=1))  # earlier occurrences
        if hits.size:
            start = int(hits[-1]) + n                                       # the token after the match
            return context[start:start + max_draft].tolist()
    return []
