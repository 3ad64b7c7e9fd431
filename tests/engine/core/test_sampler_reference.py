"""The sampler against a plain reference written here: the full softmax of the whole
vocabulary, a full stable sort for the ranking filters, a dense inverse-CDF draw with the
same seeded uniform, and log_softmax of the whole row.

The sampler works over partial selections (the ids its filters keep); these tests check
that it draws the same tokens, builds the same distribution and reports the same
logprobs as the reference, over many seeds and settings (temperature, top_k, top_p,
min_p, penalties, logit_bias, suppressed ids) on vocabularies up to Gemma 3's 262,144, and
that the work it skips is really skipped (no softmax for greedy rows, no copy of a row no
processor touches, kept sets the size of the filter).
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.api import SamplingParams
from engine.core import sampler

GEMMA_VOCAB = 262_144
VOCAB = 32_768


# --------------------------------------------------------------------------- the reference

def reference_logits(raw, params, counts, prompt, suppress):
    """The logit processors, one token at a time (float32 like the sampler's)."""
    logits = np.array(raw, dtype=np.float32)
    for token, bias in params.logit_bias:
        logits[token] += np.float32(bias)
    if params.repetition_penalty != 1.0:
        penalty = np.float32(params.repetition_penalty)
        for token in set(prompt) | {t for t, c in counts.items() if c > 0}:
            value = logits[token]
            logits[token] = value / penalty if value > 0 else value * penalty
    for token, count in counts.items():
        if count > 0 and (params.presence_penalty or params.frequency_penalty):
            logits[token] -= (np.float32(count) * np.float32(params.frequency_penalty)
                              + np.float32(params.presence_penalty))
    for token in suppress:
        logits[token] = -np.inf
    return logits


def reference_probs(logits, params):
    """Full softmax, full stable sort, the filters as masks over the whole vocabulary."""
    vocab = logits.shape[0]
    if params.temperature == 0.0 or not np.isfinite(logits.max()):
        probs = np.zeros(vocab)
        probs[int(np.argmax(logits))] = 1.0
        return probs
    z = (logits / np.float32(params.temperature)).astype(np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")                  # prob desc, ties by id
    keep = np.ones(vocab, dtype=bool)
    if 0 < params.top_k < vocab:
        keep[order[params.top_k:]] = False
    if params.top_p < 1.0:
        q = np.where(keep, p, 0.0)
        cum = np.cumsum(q[order])
        n_keep = int(np.searchsorted(cum, params.top_p * q.sum(), side="left")) + 1
        keep[order[n_keep:]] = False
    if params.min_p > 0.0:
        keep &= p >= params.min_p * p.max()
    q = np.where(keep, p, 0.0)
    return q / q.sum()


def reference_draw(probs, seed, index):
    u = np.random.default_rng([seed, index]).random()
    cum = np.cumsum(probs)
    pos = int(np.searchsorted(cum, u * cum[-1], side="right"))
    if pos >= probs.shape[0] or probs[pos] == 0.0:
        pos = int(np.flatnonzero(probs)[-1])
    return pos


def reference_logprobs(raw):
    z = np.asarray(raw, dtype=np.float64)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


# --------------------------------------------------------------------------- cases

def random_logits(rng, vocab, kind):
    if kind == "peaky":                                    # a confident model
        logits = rng.standard_normal(vocab) * 3.0
        logits[rng.integers(vocab, size=5)] += 12.0
    elif kind == "flat":                                   # the mass spread wide
        logits = rng.standard_normal(vocab) * 0.5
    else:                                                  # "ties": few distinct values
        logits = np.round(rng.standard_normal(vocab) * 2.0) / 2.0
    return logits.astype(np.float32)


def random_params(rng):
    pick = lambda options: options[int(rng.integers(len(options)))]   # noqa: E731
    return SamplingParams(
        temperature=pick([0.0, 0.3, 0.8, 1.0, 1.7]),
        top_k=pick([0, 0, 1, 5, 40, 1000]),
        top_p=pick([1.0, 1.0, 0.5, 0.9, 0.95, 0.999]),
        min_p=pick([0.0, 0.0, 0.05, 0.3]),
        repetition_penalty=pick([1.0, 1.0, 1.3]),
        presence_penalty=pick([0.0, 0.0, 0.5]),
        frequency_penalty=pick([0.0, 0.0, 0.3]),
        logit_bias=pick([(), (), ((3, 8.0), (17, -100.0))]),
        logprobs=pick([False, True]), top_logprobs=pick([0, 0, 1, 5, 20]))


def cases(count, vocab, seed):
    rng = np.random.default_rng(seed)
    for i in range(count):
        logits = random_logits(rng, vocab, ("peaky", "flat", "ties")[i % 3])
        params = random_params(rng)
        counts = {int(t): int(rng.integers(1, 4)) for t in rng.integers(vocab, size=6)}
        prompt = frozenset(int(t) for t in rng.integers(vocab, size=10))
        suppress = tuple(sorted({int(t) for t in rng.integers(vocab, size=int(rng.integers(3)))}))
        yield logits, params, counts, prompt, suppress, int(rng.integers(2**62))


def check_case(logits, params, counts, prompt, suppress, seed, indexes):
    processed = reference_logits(logits, params, counts, prompt, suppress)
    want_probs = reference_probs(processed, params)
    got_probs = sampler.processed_probs(logits, params, output_counts=counts,
                                        prompt_tokens=prompt, suppress_ids=suppress)
    assert set(np.flatnonzero(got_probs)) == set(np.flatnonzero(want_probs)), params
    np.testing.assert_allclose(got_probs, want_probs, rtol=1e-9, atol=1e-15)
    want_lp = reference_logprobs(logits)
    for index in indexes:
        got = sampler.sample(logits, params, seed=seed, sample_index=index,
                             output_counts=counts, prompt_tokens=prompt, suppress_ids=suppress)
        assert got.token == reference_draw(want_probs, seed, index), (params, seed, index)
        if not (params.logprobs or params.top_logprobs > 0):
            assert got.logprob == 0.0 and got.top_logprobs == ()
            continue
        assert abs(got.logprob - want_lp[got.token]) <= 1e-6
        want_top = np.argsort(-want_lp, kind="stable")[:params.top_logprobs]
        assert [t for t, _ in got.top_logprobs] == want_top.tolist()
        np.testing.assert_allclose([v for _, v in got.top_logprobs], want_lp[want_top], atol=1e-6)


# --------------------------------------------------------------------------- equivalence

def test_many_settings_and_seeds_draw_what_the_full_softmax_draws():
    for case in cases(150, VOCAB, seed=1):
        check_case(*case, indexes=range(8))


def test_gemma_sized_vocabularies_draw_what_the_full_softmax_draws():
    for case in cases(12, GEMMA_VOCAB, seed=2):
        check_case(*case, indexes=range(4))


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.99, 0.9999])
def test_top_p_past_every_candidate_tier_keeps_the_reference_set(top_p):
    """A flat distribution needs more ids than the short lists hold: the sampler must
    widen its selection until the mass is reached, and keep exactly the sorted prefix."""
    logits = (np.random.default_rng(3).standard_normal(GEMMA_VOCAB) * 0.2).astype(np.float32)
    params = SamplingParams(temperature=1.0, top_p=top_p)
    want = reference_probs(logits, params)
    got = sampler.processed_probs(logits, params)
    assert set(np.flatnonzero(got)) == set(np.flatnonzero(want))
    assert sampler.sample(logits, params, seed=5, sample_index=0, output_counts={}).token \
        == reference_draw(want, 5, 0)


def test_top_k_ties_across_the_cut_keep_the_lowest_ids():
    logits = np.zeros(VOCAB, dtype=np.float32)
    logits[[10, 500, 9000]] = 4.0                          # three clear winners
    params = SamplingParams(temperature=1.0, top_k=8)      # ... and 5 of 32,765 tied zeros
    kept = sampler.kept_ids(sampler.processed_logits(logits, params), params)
    assert kept.ids.tolist() == [0, 1, 2, 3, 4, 10, 500, 9000]
    np.testing.assert_allclose(sampler.processed_probs(logits, params), reference_probs(logits, params))


def test_greedy_with_processors_and_logprobs_matches_the_reference():
    for logits, params, counts, prompt, suppress, seed in cases(40, VOCAB, seed=4):
        greedy = SamplingParams(**{**params.__dict__, "temperature": 0.0})
        check_case(logits, greedy, counts, prompt, suppress, seed, indexes=[0])


# --------------------------------------------------------------------------- the work skipped

def test_a_row_no_processor_touches_is_not_copied():
    row = np.random.default_rng(6).standard_normal(VOCAB).astype(np.float32)
    plain = sampler.processed_logits(row, SamplingParams(temperature=0.7, top_k=5))
    assert np.shares_memory(plain, row)
    biased = sampler.processed_logits(row, SamplingParams(logit_bias=((1, 1.0),)))
    assert not np.shares_memory(biased, row) and biased[1] == row[1] + np.float32(1.0)


def test_greedy_rows_build_no_distribution(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a greedy row built its kept ids")
    monkeypatch.setattr(sampler, "kept_ids", refuse)
    row = np.random.default_rng(7).standard_normal(VOCAB).astype(np.float32)
    params = SamplingParams(temperature=0.0, presence_penalty=0.5, logprobs=True, top_logprobs=3)
    got = sampler.sample(row, params, seed=1, sample_index=0, output_counts={5: 1})
    assert got.token == int(np.argmax(reference_logits(row, params, {5: 1}, (), ())))


@pytest.mark.parametrize("params, most", [(SamplingParams(top_k=40), 40),
                                          (SamplingParams(top_k=40, top_p=0.9), 40),
                                          (SamplingParams(top_p=0.9), 256),
                                          (SamplingParams(min_p=0.1), 64)])
def test_the_kept_ids_are_the_filters_size_not_the_vocabulary(params, most):
    rng = np.random.default_rng(8)
    logits = rng.standard_normal(GEMMA_VOCAB).astype(np.float32)          # a model's row: ...
    logits[rng.choice(GEMMA_VOCAB, 30)] += 14 + 2 * rng.standard_normal(30).astype(np.float32)
    kept = sampler.kept_ids(logits, params)                               # ... 30 likely ids
    assert kept.ids is not None and 1 <= kept.ids.shape[0] <= most
    assert kept.weights.shape == kept.ids.shape
    assert np.all(np.diff(kept.ids) > 0)                   # ascending: the draw's id order


def test_logprobs_without_top_list_match_the_full_log_softmax_bit_for_bit():
    row = random_logits(np.random.default_rng(9), GEMMA_VOCAB, "peaky")
    want = reference_logprobs(row)
    got = sampler.RowLogprobs(row)
    for token in (0, 17, int(np.argmax(row)), GEMMA_VOCAB - 1):
        assert got.of(token) == want[token]


@pytest.mark.parametrize("kind", ["peaky", "flat", "ties", "sample_misleads"])
@pytest.mark.parametrize("count", [1, 5, 40, 256, 4096, 5000])
def test_at_least_holds_the_count_largest_and_their_ties(kind, count):
    rng = np.random.default_rng(count)
    if kind == "sample_misleads":                       # every 64th value high, the rest tied
        values = np.zeros(GEMMA_VOCAB, dtype=np.float32)
        values[::sampler.SAMPLE_STRIDE] = 10.0
    else:
        values = random_logits(rng, GEMMA_VOCAB, kind)
    ids = sampler.at_least(values, count)
    kth = np.sort(values)[::-1][count - 1]              # the count-th largest, by a full sort
    assert np.all(np.diff(ids) > 0)
    assert set(np.flatnonzero(values >= kth)) <= set(ids.tolist())
