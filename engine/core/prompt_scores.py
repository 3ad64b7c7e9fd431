"""Prompt scoring: the log-probability of every prompt token, for evaluation requests.

A request with `GenRequest.prompt_logprobs = k` gets logits for every row of its prefill
chunks (not only the last); the row at position p predicts token p + 1, so a chunk over
positions [start, start + n) scores prompt tokens start + 1 .. start + n (those < the
prompt length). Only the token's logprob and the top-k survive each row: a long prompt's
full logits [P, V] would not fit (8k tokens x 49k vocab x 4 B = 1.6 GB), so they are
reduced chunk by chunk. The numbers are the log-softmax of the raw logits, as the
sampler reports for sampled tokens (engine/core/sampler.py).
"""
from __future__ import annotations

import numpy as np

from engine.core import sampler
from engine.core.sequence import Sequence
from engine.types import PromptLogprobs


def score_chunk(seq: Sequence, start_pos: int, logits: np.ndarray) -> PromptLogprobs | None:
    """logits [n, V] for positions start_pos .. start_pos+n-1 -> the scores of the prompt
    tokens they predict that were not scored yet (a recompute after preemption repeats
    positions), or None when there are none and the prompt is not just complete."""
    k = seq.req.prompt_logprobs or 0
    first = max(seq.num_prompt_scored, start_pos + 1)            # the first token to score
    last = min(start_pos + logits.shape[0], seq.num_prompt - 1)  # the last one (inclusive)
    complete = start_pos + logits.shape[0] >= seq.num_prompt and not seq.prompt_scored
    if first > last and not complete:
        return None
    tokens, logprobs, tops = [], [], []
    for position in range(first, last + 1):
        token = seq.tokens[position]
        row = sampler.RowLogprobs(logits[position - 1 - start_pos])           # of a [V] row
        tokens.append(token)
        logprobs.append(row.of(token))
        tops.append(row.top(k))
    seq.num_prompt_scored = max(seq.num_prompt_scored, last + 1)
    seq.prompt_scored = seq.prompt_scored or complete
    return PromptLogprobs(id=seq.id, start=first, tokens=tuple(tokens), logprobs=tuple(logprobs),
                          top_logprobs=tuple(tops), complete=complete)
