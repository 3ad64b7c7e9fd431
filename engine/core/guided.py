"""Sampling under a grammar: the token mask applied before temperature and the filters.

The distribution is the sampler's own (engine/core/sampler.py) with every token the
grammar refuses at -inf, applied after the logit processors and BEFORE temperature, top_k,
top_p and min_p (vLLM's order). Building the mask walks the vocabulary, so it is built only
when needed:

* greedy: the argmax of the processed logits; when the grammar allows it, it is also the
  argmax of the masked logits (masking only removes), so no mask is built;
* temperature without filters: draw from the unmasked distribution p with the request's
  seeded uniform; if the grammar allows the token, keep it, else draw again from the masked
  distribution p/A with a second seeded uniform. P(t) = p(t) + (1 - A) p(t)/A = p(t)/A:
  exactly the masked distribution, and still a pure function of (seed, sample_index);
* filters (top_k, top_p, min_p) or logprobs: the mask first, always (they are defined on
  the masked distribution).

Logprobs are reported over the masked distribution (log_softmax of the masked raw logits).
When nothing is left (the grammar is complete but `min_tokens`/`ignore_eos` masked EOS) the
grammar wins: the mask alone decides, over the raw logits.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from engine.core import sampler
from engine.grammar.constraint import Constraint
from engine.types import SamplingParams

SECOND_DRAW = 1                 # the stream index of the redraw after a refused token


def _masked(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, logits, np.float32(-np.inf))                          # [V] float32


def _has_filters(params: SamplingParams) -> bool:
    return params.top_k > 0 or params.top_p < 1.0 or params.min_p > 0.0


def sample_guided(logits_row: np.ndarray, params: SamplingParams, constraint: Constraint, *,
                  seed: int, sample_index: int, output_counts: Mapping[int, int],
                  prompt_tokens=frozenset(), suppress_ids: tuple[int, ...] = ()) -> sampler.SampleResult:
    """One token the grammar allows; see the module docstring."""
    logits = sampler.processed_logits(logits_row, params, output_counts=output_counts,
                                      prompt_tokens=prompt_tokens, suppress_ids=suppress_ids)   # [V]
    wants_logprobs = params.logprobs or params.top_logprobs > 0
    token = None
    if not wants_logprobs and params.temperature == 0.0:
        first = int(np.argmax(logits))
        token = first if np.isfinite(logits[first]) and constraint.allows(first) else None
    elif not wants_logprobs and not _has_filters(params):
        first = sampler.choose(logits, params, seed=seed, sample_index=sample_index)
        token = first if constraint.allows(first) else None
    mask = None
    if token is None:
        mask = constraint.mask()                                                  # [V] bool
        masked = _masked(logits, mask)
        if not np.isfinite(masked.max()):                                         # the grammar wins
            masked = _masked(np.asarray(logits_row, dtype=np.float32), mask)
        token = sampler.choose(masked, params, seed=seed, sample_index=sample_index, stream=SECOND_DRAW)
    if not wants_logprobs:
        return sampler.SampleResult(token, 0.0, ())
    logprobs = sampler.RowLogprobs(_masked(np.asarray(logits_row, dtype=np.float32), mask))
    top = tuple(p for p in logprobs.top(params.top_logprobs) if np.isfinite(p[1]))
    return sampler.SampleResult(token, logprobs.of(token), top)
