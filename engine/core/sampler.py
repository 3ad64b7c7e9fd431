"""Logits -> one token: the per-request sampler, deterministic in (seed, sample_index).

What it is: pure functions from one row of model logits and a request's
`SamplingParams` to a token id, its reported log-probability and the top alternatives.
What it is not: batching, stop handling or detokenizing (the engine does those).

The pipeline, in order (each stage is a no-op when its parameter is at its default):

1. logit processors, on a float32 copy of the raw logits (no copy when none is active):
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

Work over the vocabulary only where a request needs it (Gemma 3's is 262,144 wide): the
filters pick their kept ids (`Kept`, ascending) by partial selection (`at_least`: a cut
found in a sample of the row, one comparison pass, `np.partition` of what passes), never
a full sort; the softmax and the inverse CDF then run over the kept ids alone, in id
order, unnormalised (the draw scales `u` by their total). Only top_p without top_k needs
every exponential (its threshold is a share of the whole mass), and only plain
temperature sampling keeps every id. The probabilities are the full softmax's; only the
rounding of the normalisation differs, which could move a draw only if `u` fell within a
few float64 ulps of a cumulative boundary.

Batched greedy: most rows of a busy step are plain greedy (temperature 0, no processor
active, no log-probabilities wanted), and for them the whole pipeline reduces to the
argmax of the raw logits. `is_plain_greedy` recognises such a row, and the engine takes
the argmax of all of a step's logit rows at once (`greedy_tokens`) instead of copying and
one-hot-encoding each 49k-wide row; the token is the same by construction.

Reported numbers follow vLLM's default: `logprob` and `top_logprobs` come from
log_softmax of the RAW logits (before any processing), and are computed only when the
request asked for them (`logprob` is 0.0 otherwise): one pass for the log of the softmax's
total (`RowLogprobs`), then the token's number and the top list's candidates alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from engine.types import SamplingParams

F32 = np.float32
F64 = np.float64
# top_p: before ordering the whole vocabulary, try the best this-many candidates (one
# partial selection each); a model's top_p mass is usually reached within the first. Only
# the tier that holds it is sorted, so the tiers grow by 4 (sorting 16k ids takes ~1 ms,
# 65k ~6 ms, all 262k ~30 ms).
TOP_P_CANDIDATES = (256, 1024, 4096, 16384, 65536)
# A selection of the `count` largest of V values first looks for a cut in every
# SAMPLE_STRIDE-th value (the vocabulary's order is unrelated to the logits, so the
# sample ranks like the whole): the cut below its count // SAMPLE_STRIDE + SAMPLE_SPARE
# largest usually has a few hundred values above it, found by one comparison pass; only
# when fewer than `count` pass does the whole row get partitioned.
SAMPLE_STRIDE = 64
SAMPLE_SPARE = 8
# The inverse CDF of at least CDF_MIN_BLOCKS x CDF_BLOCK weights finds its block first.
CDF_BLOCK = 1024
CDF_MIN_BLOCKS = 8
# min_p keeps ids whose probability is at least min_p x the best one's: a logit at least
# log(min_p) below the best. Ids are short-listed in float32 with this much slack (in
# logit units, far above float32's rounding), then tested exactly in float64.
MIN_P_SLACK = 1e-3


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


def has_processors(params: SamplingParams, suppress_ids: tuple[int, ...] = ()) -> bool:
    """Whether any logit processor would change a row under `params`."""
    return bool(params.logit_bias or suppress_ids or params.repetition_penalty != 1.0
                or params.presence_penalty != 0.0 or params.frequency_penalty != 0.0)


def processed_logits(logits_row: np.ndarray, params: SamplingParams, *,
                     output_counts: Mapping[int, int] | None = None,
                     prompt_tokens=frozenset(), suppress_ids: tuple[int, ...] = ()) -> np.ndarray:
    """Raw logits [V] -> float32 logits after bias, penalties and suppression: a copy when
    a processor is active, else the row itself (callers read it, never write it)."""
    if not has_processors(params, suppress_ids):
        return np.asarray(logits_row, dtype=F32)                        # [V], no copy
    hist = _History(output_counts or {}, prompt_tokens, tuple(suppress_ids))
    logits = np.array(logits_row, dtype=F32, copy=True)                 # [V]
    for processor in LOGIT_PROCESSORS:
        processor(logits, params, hist)
    return logits


# --------------------------------------------------------------------------- the kept ids

@dataclass(frozen=True)
class Kept:
    """What a draw walks: the ids the filters kept, ascending, and their unnormalised
    probabilities exp((logit - best) / temperature) in float64 (zero: dropped by min_p)."""
    ids: np.ndarray | None           # [K] int64 ascending; None: every id, 0..V-1
    weights: np.ndarray              # [K] (or [V]) float64


def kept_ids(logits: np.ndarray, params: SamplingParams) -> Kept:
    """Processed logits [V] (finite best) -> the kept ids after temperature and the
    filters top_k, top_p, min_p (each at its default keeps everything)."""
    scaled = logits / F32(params.temperature)                           # [V] float32
    best = F64(scaled.max())
    ids = None
    if 0 < params.top_k < scaled.shape[0]:
        ids = _top_k(scaled, params.top_k)                              # [k]
    if params.top_p < 1.0:
        ids = _top_p(scaled, best, ids, params.top_p)                   # [K]
    if params.min_p > 0.0 and ids is None:
        floor = F32(best + np.log(params.min_p) - MIN_P_SLACK)
        ids = np.flatnonzero(scaled >= floor)                           # [K], a superset
    weights = (scaled if ids is None else scaled[ids]).astype(F64)      # [K]
    weights -= best
    np.exp(weights, out=weights)                                        # [K], the best is 1.0
    if params.min_p > 0.0:
        weights[weights < params.min_p * weights.max()] = 0.0           # exact, in float64
    return Kept(ids, weights)


def at_least(values: np.ndarray, count: int) -> np.ndarray:
    """Ids (ascending) of every value at or above a cut that at least `count` values
    reach: the `count` largest and their ties, and usually a few hundred more. [V] -> [C]."""
    vocab = values.shape[0]
    count = min(max(count, 1), vocab)
    sample = values[::SAMPLE_STRIDE]                                    # [V / stride] (a copy-free view)
    wanted = count // SAMPLE_STRIDE + SAMPLE_SPARE
    if wanted < sample.shape[0] // 4:
        cut = np.partition(sample, sample.shape[0] - wanted)[sample.shape[0] - wanted]
        ids = np.flatnonzero(values >= cut)                             # [C]
        if ids.shape[0] >= count:
            return ids
    cut = np.partition(values, vocab - count)[vocab - count]            # the count-th largest
    return np.flatnonzero(values >= cut)


def _top_k(scaled: np.ndarray, k: int) -> np.ndarray:
    """The k largest ids, ascending; ties at the cut go to the lower ids. [V] -> [k]."""
    candidates = at_least(scaled, k)                                    # [C >= k] ascending
    values = scaled[candidates]                                         # [C]
    kth = np.partition(values, values.shape[0] - k)[values.shape[0] - k]   # the k-th largest value
    above = candidates[values > kth]                                    # [< k]
    ties = candidates[values == kth][:k - above.shape[0]]               # the lowest ids at the cut
    return np.union1d(above, ties)                                      # [k] ascending


def _top_p(scaled: np.ndarray, best: float, ids: np.ndarray | None, top_p: float) -> np.ndarray:
    """The smallest set of best ids whose mass reaches top_p of the kept mass (ids None:
    the whole vocabulary's), ascending. Ranked by probability, ties by the lower id."""
    if ids is not None:
        candidates = ids                                                # [k]: top_k ran first
        weights = np.exp(scaled[ids].astype(F64) - best)                # [k]
        target = top_p * weights.sum()
    else:
        every = scaled.astype(F64)                                      # [V]: the whole mass
        every -= best
        np.exp(every, out=every)
        target = top_p * every.sum()
        vocab = scaled.shape[0]
        candidates = np.arange(vocab)
        for size in TOP_P_CANDIDATES:
            if size < vocab:
                best_ids = at_least(scaled, size)                       # [>= size]
                if every[best_ids].sum() >= target:
                    candidates = best_ids
                    break
        weights = every[candidates]                                     # [C]
    order = np.lexsort((candidates, -weights))                          # prob desc, id asc
    cum = np.cumsum(weights[order])                                     # [C]
    keep = int(np.searchsorted(cum, target, side="left")) + 1           # smallest prefix >= top_p
    return np.sort(candidates[order[:keep]])                            # [K] ascending


def processed_probs(logits_row: np.ndarray, params: SamplingParams, *,
                    output_counts: Mapping[int, int] | None = None,
                    prompt_tokens=frozenset(), suppress_ids: tuple[int, ...] = ()) -> np.ndarray:
    """The distribution a token is drawn from, after all processing: float64 [V] summing to 1.

    Greedy (temperature 0) gives the one-hot vector of the argmax. (The sampler itself
    draws from the kept ids without building this dense vector.)
    """
    logits = processed_logits(logits_row, params, output_counts=output_counts,
                              prompt_tokens=prompt_tokens, suppress_ids=suppress_ids)
    probs = np.zeros(logits.shape[0], dtype=F64)                        # [V]
    if params.temperature == 0.0 or not np.isfinite(logits.max()):
        probs[int(np.argmax(logits))] = 1.0
        return probs
    kept = kept_ids(logits, params)
    probs[slice(None) if kept.ids is None else kept.ids] = kept.weights / kept.weights.sum()
    return probs


def choose(logits: np.ndarray, params: SamplingParams, *, seed: int, sample_index: int,
           stream: int = 0) -> int:
    """Processed logits [V] -> the token: the argmax under temperature 0 (or when every
    logit is -inf), else a draw over the kept ids (`stream` as in `draw`)."""
    if params.temperature == 0.0 or not np.isfinite(logits.max()):
        return int(np.argmax(logits))
    kept = kept_ids(logits, params)
    pos = _inverse_cdf(kept.weights, _uniform(seed, sample_index, stream))
    return pos if kept.ids is None else int(kept.ids[pos])


def draw(probs: np.ndarray, *, seed: int, sample_index: int, stream: int = 0) -> int:
    """Inverse-CDF draw over probs [V] in id order; a pure function of (seed, sample_index).

    `stream` > 0 gives an independent uniform for the same position (guided.py's redraw)."""
    return _inverse_cdf(probs, _uniform(seed, sample_index, stream))


def _uniform(seed: int, sample_index: int, stream: int) -> float:
    key = [int(seed) & (2**63 - 1), int(sample_index)] + ([int(stream)] if stream else [])
    return np.random.default_rng(key).random()


def _inverse_cdf(weights: np.ndarray, u: float) -> int:
    """The first position whose running total passes u x the total: weights [K] -> index.

    A long row is walked in blocks (a running sum over the whole vocabulary is one long
    chain of dependent additions, ~0.9 ms at 262k): the blocks' totals find the block, one
    short running sum the position. The totals round in their own order, so a `u` on a
    boundary's last bits, or a block that rounding leaves without the target, takes the
    plain walk below."""
    size = weights.shape[0]
    if size >= CDF_MIN_BLOCKS * CDF_BLOCK:
        totals = np.cumsum(np.add.reduceat(weights, np.arange(0, size, CDF_BLOCK)))   # [nb]
        target = u * totals[-1]
        block = int(np.searchsorted(totals, target, side="right"))
        if block < totals.shape[0]:
            start = block * CDF_BLOCK
            before = totals[block - 1] if block else 0.0
            inner = before + np.cumsum(weights[start:start + CDF_BLOCK])              # [<= block]
            pos = start + int(np.searchsorted(inner, target, side="right"))
            if pos < min(start + CDF_BLOCK, size) and weights[pos] != 0.0:
                return pos
    cum = np.cumsum(weights)                                            # [K]
    pos = int(np.searchsorted(cum, u * cum[-1], side="right"))
    if pos >= weights.shape[0] or weights[pos] == 0.0:                  # rounding at the very top
        pos = int(np.flatnonzero(weights)[-1])
    return pos


# --------------------------------------------------------------------------- batched greedy

def is_plain_greedy(params: SamplingParams, suppress_ids: tuple[int, ...] = ()) -> bool:
    """True when `sample` is exactly argmax(raw logits) with logprob 0.0 and no top list."""
    return (params.temperature == 0.0 and not has_processors(params, suppress_ids)
            and not params.logprobs and params.top_logprobs <= 0)


def greedy_tokens(logits: np.ndarray) -> np.ndarray:
    """Argmax of each row at once: logits [R, V] -> token ids [R] (ties: lowest id)."""
    return np.argmax(logits, axis=-1)                                   # [R]


def greedy_result(token: int) -> SampleResult:
    """What `sample` returns for a plain-greedy row whose argmax is `token`."""
    return SampleResult(int(token), 0.0, ())


# --------------------------------------------------------------------------- reporting

class RowLogprobs:
    """log_softmax of one row of logits [V], without building it: one pass for the log of
    the total, then any token's number, or the best few, from their logits alone.

    logprob(t) = (logit[t] - max) - log(sum(exp(logits - max))), in float64; -inf logits
    (a grammar's mask) give -inf."""

    def __init__(self, logits_row: np.ndarray):
        self.logits = np.asarray(logits_row, dtype=F32)                 # [V], read only
        z = self.logits.astype(F64)                                     # [V]
        self.shift = F64(z.max())
        z -= self.shift
        np.exp(z, out=z)
        self.log_total = F64(np.log(z.sum()))

    def of(self, token: int) -> float:
        return float((F64(self.logits[token]) - self.shift) - self.log_total)

    def top(self, count: int) -> tuple[tuple[int, float], ...]:
        """The `count` best (id, logprob) pairs, logprob descending then id ascending."""
        vocab = self.logits.shape[0]
        count = min(count, vocab)
        if count <= 0:
            return ()
        candidates = at_least(self.logits, count) if count < vocab else np.arange(vocab)  # [C]
        logprobs = (self.logits[candidates].astype(F64) - self.shift) - self.log_total
        order = np.lexsort((candidates, -logprobs))[:count]
        return tuple((int(candidates[i]), float(logprobs[i])) for i in order)


def sample(logits_row: np.ndarray, params: SamplingParams, *, seed: int, sample_index: int,
           output_counts: Mapping[int, int], prompt_tokens=frozenset(),
           suppress_ids: tuple[int, ...] = ()) -> SampleResult:
    """Pick one token from a row of raw logits [V] under `params`; see the module docstring.

    Greedy takes the argmax of the processed logits: the same id as the argmax of
    `processed_probs`'s one-hot, without building it.
    """
    logits = processed_logits(logits_row, params, output_counts=output_counts,
                              prompt_tokens=prompt_tokens, suppress_ids=suppress_ids)
    token = choose(logits, params, seed=seed, sample_index=sample_index)
    if not (params.logprobs or params.top_logprobs > 0):
        return SampleResult(token, 0.0, ())
    logprobs = RowLogprobs(logits_row)
    return SampleResult(token, logprobs.of(token), logprobs.top(params.top_logprobs))
