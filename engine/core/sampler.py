"""Logits -> one token: the per-request sampler, deterministic in (seed, sample_index).

What it is: pure functions from one row of model logits and a request's
`SamplingParams` to a token id, its reported log-probability and the top alternatives.
What it is not: batching, stop handling or detokenizing (the engine does those).

The pipeline, in order (each stage is a no-op when its parameter is at its default):

1. logit processors, on a float32 copy of the raw logits:
   `logit_bias` (added), `repetition_penalty` (Hugging Face style over prompt + output
   tokens: a positive logit is divided by it, a negative one multiplied),
   `presence_penalty` / `frequency_penalty` (OpenAI's formula over output tokens:
   `logit -= count * frequency + (count > 0) * presence`), then `suppress_ids` set to -inf
   (the engine's lever for `min_tokens` and `ignore_eos`);
2. temperature 0: greedy argmax (ties go to the lowest id);
3. otherwise softmax(logits / temperature), then the filters top_k, top_p, min_p, and
   one draw. The draw is a pure function of (seed, sample_index):
   `u = default_rng([seed, sample_index]).random()` walks the inverse CDF of the kept
   probabilities in id order (a fixed order that needs no sort of the vocabulary), so
   replaying a request replays its tokens, whatever else shared its batch. Filters that
   rank (top_k, top_p) break ties by the lower id.

Batched greedy: most rows of a busy step are plain greedy (temperature 0, no processor
active, no log-probabilities wanted), and for them the whole pipeline reduces to the
argmax of the raw logits. `is_plain_greedy` recognises such a row, and the engine takes
the argmax of all of a step's logit rows at once (`greedy_tokens`) instead of copying and
one-hot-encoding each 49k-wide row; the token is the same by construction.

Reported numbers follow vLLM's default: `logprob` and `top_logprobs` come from
log_softmax of the RAW logits (before any processing), and are computed only when the
request asked for them (`logprob` is 0.0 otherwise).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from engine.types import SamplingParams

# top_p: before sorting the whole vocabulary, try the best this-many candidates; a
# model's top_p mass is usually reached within them, which saves a 49k-element sort.
TOP_P_CANDIDATES = (256, 4096)


@dataclass(frozen=True)
class SampleResult:
    token: int
    logprob: float
    top_logprobs: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class _History:
    """What the penalties look at: output token counts, the prompt's token set, masked ids."""
    output_counts: Mapping[int, int]
    prompt_tokens: frozenset | set
    suppress_ids: tuple[int, ...]


# --------------------------------------------------------------------------- logit processors

def _apply_logit_bias(logits: np.ndarray, params: SamplingParams, hist: _History) -> None:
    for token, bias in params.logit_bias:
        if 0 <= token < logits.shape[0]:
            logits[token] += np.float32(bias)


def _apply_repetition_penalty(logits: np.ndarray, params: SamplingParams, hist: _History) -> None:
    penalty = params.repetition_penalty
    if penalty == 1.0:
        return
    # The prompt set is used as is (no per-token copy); an id in both lists is harmless:
    # every write of it stores the same value, computed from the logits before any write.
    prompt = np.fromiter(hist.prompt_tokens, dtype=np.int64, count=len(hist.prompt_tokens))   # [P]
    output = np.fromiter((t for t, c in hist.output_counts.items() if c > 0), dtype=np.int64)  # [O]
    ids = np.concatenate([prompt, output])                              # [k]
    ids = ids[(ids >= 0) & (ids < logits.shape[0])]
    if ids.size == 0:
        return
    vals = logits[ids]                                                  # [k]
    logits[ids] = np.where(vals > 0, vals / np.float32(penalty), vals * np.float32(penalty))


def _apply_presence_frequency(logits: np.ndarray, params: SamplingParams, hist: _History) -> None:
    if params.presence_penalty == 0.0 and params.frequency_penalty == 0.0:
        return
    pairs = [(t, c) for t, c in hist.output_counts.items() if c > 0 and 0 <= t < logits.shape[0]]
    if not pairs:
        return
    ids = np.array([t for t, _ in pairs], dtype=np.int64)               # [k]
    counts = np.array([c for _, c in pairs], dtype=np.float32)          # [k]
    logits[ids] -= counts * np.float32(params.frequency_penalty) + np.float32(params.presence_penalty)


def _apply_suppress(logits: np.ndarray, params: SamplingParams, hist: _History) -> None:
    ids = [t for t in hist.suppress_ids if 0 <= t < logits.shape[0]]
    if ids:
        logits[ids] = -np.inf


LOGIT_PROCESSORS: tuple[Callable[[np.ndarray, SamplingParams, _History], None], ...] = (
    _apply_logit_bias, _apply_repetition_penalty, _apply_presence_frequency, _apply_suppress)


def processed_logits(logits_row: np.ndarray, params: SamplingParams, *,
                     output_counts: Mapping[int, int] | None = None,
                     prompt_tokens=frozenset(), suppress_ids: tuple[int, ...] = ()) -> np.ndarray:
    """Raw logits [V] -> a float32 copy after bias, penalties and suppression."""
    hist = _History(output_counts or {}, prompt_tokens, tuple(suppress_ids))
    logits = np.array(logits_row, dtype=np.float32, copy=True)          # [V]
    for processor in LOGIT_PROCESSORS:
        processor(logits, params, hist)
    return logits


# --------------------------------------------------------------------------- filters on probs

def _descending_order(probs: np.ndarray) -> np.ndarray:
    """All ids ordered by probability descending, ties by id ascending."""
    return np.argsort(-probs, kind="stable")                            # [V]


def _filter_top_k(probs: np.ndarray, params: SamplingParams) -> None:
    k = params.top_k
    if k <= 0 or k >= probs.shape[0]:
        return
    kth = np.partition(probs, probs.shape[0] - k)[probs.shape[0] - k]  # k-th largest value
    above = probs > kth
    ties = np.flatnonzero(probs == kth)[:k - int(above.sum())]         # ties at the cut: lowest ids
    probs[~above] = 0.0
    probs[ties] = kth


def _filter_top_p(probs: np.ndarray, params: SamplingParams) -> None:
    top_p = params.top_p
    if top_p >= 1.0:
        return
    target = top_p * probs.sum()
    order = None
    for size in TOP_P_CANDIDATES:
        if size < probs.shape[0]:
            best = np.argpartition(-probs, size)[:size]                 # [size], unordered
            if probs[best].sum() >= target:
                order = best[np.lexsort((best, -probs[best]))]          # prob desc, id asc
                break
    if order is None:
        order = _descending_order(probs)
    cum = np.cumsum(probs[order])
    keep = int(np.searchsorted(cum, target, side="left")) + 1          # smallest prefix >= top_p
    keep_mask = np.zeros(probs.shape[0], dtype=bool)
    keep_mask[order[:keep]] = True
    probs[~keep_mask] = 0.0


def _filter_min_p(probs: np.ndarray, params: SamplingParams) -> None:
    if params.min_p <= 0.0:
        return
    probs[probs < params.min_p * probs.max()] = 0.0


PROB_FILTERS: tuple[Callable[[np.ndarray, SamplingParams], None], ...] = (
    _filter_top_k, _filter_top_p, _filter_min_p)


def softmax64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)                                            # [V]
    z -= z.max()
    np.exp(z, out=z)
    z /= z.sum()
    return z


def processed_probs(logits_row: np.ndarray, params: SamplingParams, *,
                    output_counts: Mapping[int, int] | None = None,
                    prompt_tokens=frozenset(), suppress_ids: tuple[int, ...] = ()) -> np.ndarray:
    """The distribution a token is drawn from, after all processing: float64 [V] summing to 1.

    Greedy (temperature 0) gives the one-hot vector of the argmax.
    """
    logits = processed_logits(logits_row, params, output_counts=output_counts,
                              prompt_tokens=prompt_tokens, suppress_ids=suppress_ids)
    if params.temperature == 0.0 or not np.isfinite(logits.max()):
        probs = np.zeros(logits.shape[0], dtype=np.float64)
        probs[int(np.argmax(logits))] = 1.0
        return probs
    probs = softmax64(logits / np.float32(params.temperature))         # [V]
    for keep in PROB_FILTERS:
        keep(probs, params)
    return probs / probs.sum()


def draw(probs: np.ndarray, *, seed: int, sample_index: int, stream: int = 0) -> int:
    """Inverse-CDF draw over probs [V] in id order; a pure function of (seed, sample_index).

    `stream` > 0 gives an independent uniform for the same position (guided.py's redraw)."""
    key = [int(seed) & (2**63 - 1), int(sample_index)] + ([int(stream)] if stream else [])
    u = np.random.default_rng(key).random()
    cum = np.cumsum(probs)                                              # [V]
    pos = int(np.searchsorted(cum, u * cum[-1], side="right"))
    if pos >= probs.shape[0] or probs[pos] == 0.0:                      # rounding at the very top
        pos = int(np.flatnonzero(probs)[-1])
    return pos


# --------------------------------------------------------------------------- batched greedy

def is_plain_greedy(params: SamplingParams, suppress_ids: tuple[int, ...] = ()) -> bool:
    """True when `sample` is exactly argmax(raw logits) with logprob 0.0 and no top list."""
    return (params.temperature == 0.0 and not params.logit_bias and not suppress_ids
            and params.repetition_penalty == 1.0 and params.presence_penalty == 0.0
            and params.frequency_penalty == 0.0 and not params.logprobs
            and params.top_logprobs <= 0)


def greedy_tokens(logits: np.ndarray) -> np.ndarray:
    """Argmax of each row at once: logits [R, V] -> token ids [R] (ties: lowest id)."""
    return np.argmax(logits, axis=-1)                                   # [R]


def greedy_result(token: int) -> SampleResult:
    """What `sample` returns for a plain-greedy row whose argmax is `token`."""
    return SampleResult(int(token), 0.0, ())


# --------------------------------------------------------------------------- reporting

def log_softmax(logits_row: np.ndarray) -> np.ndarray:
    """Raw logits [V] -> log-probabilities [V] (float64)."""
    z = logits_row.astype(np.float64)
    z -= z.max()
    z -= np.log(np.exp(z).sum())
    return z


def top_logprobs_of(logprobs: np.ndarray, count: int) -> tuple[tuple[int, float], ...]:
    """The `count` best (id, logprob) pairs, logprob descending then id ascending."""
    if count <= 0:
        return ()
    count = min(count, logprobs.shape[0])
    # Take a few extra candidates so ties at the cut are still ordered by id.
    cand = np.argpartition(-logprobs, count - 1)[:count] if count < logprobs.shape[0] \
        else np.arange(logprobs.shape[0])
    cut = logprobs[cand].min()
    cand = np.flatnonzero(logprobs >= cut)
    cand = cand[np.lexsort((cand, -logprobs[cand]))][:count]
    return tuple((int(t), float(logprobs[t])) for t in cand)


def sample(logits_row: np.ndarray, params: SamplingParams, *, seed: int, sample_index: int,
           output_counts: Mapping[int, int], prompt_tokens=frozenset(),
           suppress_ids: tuple[int, ...] = ()) -> SampleResult:
    """Pick one token from a row of raw logits [V] under `params`; see the module docstring.

    Greedy takes the argmax of the processed logits: the same id as the argmax of
    `processed_probs`'s one-hot, without building it.
    """
    history = dict(output_counts=output_counts, prompt_tokens=prompt_tokens, suppress_ids=suppress_ids)
    if params.temperature == 0.0:
        token = int(np.argmax(processed_logits(logits_row, params, **history)))
    else:
        token = draw(processed_probs(logits_row, params, **history), seed=seed, sample_index=sample_index)
    if not (params.logprobs or params.top_logprobs > 0):
        return SampleResult(token, 0.0, ())
    logprobs = log_softmax(np.asarray(logits_row))
    return SampleResult(token, float(logprobs[token]), top_logprobs_of(logprobs, params.top_logprobs))
