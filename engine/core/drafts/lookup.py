"""Prompt lookup: drafts from the request's own context.

When a model repeats or edits text it was given (summaries that quote, code edits, "repeat
this passage"), the next tokens often already appear in the context right after the
current last few tokens. `propose` finds the most recent earlier occurrence of the
context's last n-gram (n from `prompt_lookup_max` down to `prompt_lookup_min`) and
proposes the tokens that followed it (repeating them when they reach the context's end:
the context is a loop of that period). `agreement` is the backward match the prediction
cursor and the suffix store rank their candidates by.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engine.types import SpeculativeConfig


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
            # What followed the match, up to the context's end; past it, the same rule goes
            # on over the draft itself, so a repetition of period total - start continues
            # (a small model's loop, " rate-limited rate-limited ...", drafts whole).
            return np.resize(context[start:], max_draft).tolist()
    return []


def agreement(token_at: Callable[[int], int], end: int, context: list[int], limit: int) -> int:
    """How many of `context`'s last tokens, up to `limit`, equal the stored tokens ending at
    `end` (`token_at(end)`, `token_at(end - 1)`, ...)."""
    n = 0
    while n < limit and token_at(end - n) == context[-1 - n]:
        n += 1
    return n
