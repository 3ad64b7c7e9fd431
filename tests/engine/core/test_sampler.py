"""The sampler: greedy, seeded draws, filters, penalties and reported logprobs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.core import sampler
from engine.api import SamplingParams

LOGITS = np.array([1.0, 3.0, 2.5, -1.0, 0.0, 2.9, -4.0, 1.5], dtype=np.float32)


def run(params, logits=LOGITS, *, seed=0, index=0, counts=None, prompt=frozenset(), suppress=()):
    return sampler.sample(logits, params, seed=seed, sample_index=index,
                          output_counts=counts or {}, prompt_tokens=prompt, suppress_ids=suppress)


def softmax(x):
    z = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return z / z.sum()


def test_greedy_is_argmax_and_one_hot():
    assert run(SamplingParams(temperature=0.0)).token == 1
    probs = sampler.processed_probs(LOGITS, SamplingParams(temperature=0.0))
    assert probs[1] == 1.0 and probs.sum() == 1.0


def test_greedy_ties_go_to_the_lowest_id():
    logits = np.array([0.0, 5.0, 5.0, 1.0], dtype=np.float32)
    assert run(SamplingParams(temperature=0.0), logits).token == 1


def test_same_seed_and_index_repeat_and_other_seeds_differ():
    params = SamplingParams(temperature=1.5)
    first = [run(params, seed=42, index=i).token for i in range(200)]
    again = [run(params, seed=42, index=i).token for i in range(200)]
    other = [run(params, seed=43, index=i).token for i in range(200)]
    assert first == again
    assert first != other
    assert len(set(first)) > 3                     # really sampling, not stuck on one id


def test_draws_over_many_indexes_follow_the_softmax():
    params = SamplingParams(temperature=0.7)
    draws = 20000
    counts = np.bincount([run(params, seed=7, index=i).token for i in range(draws)],
                         minlength=LOGITS.shape[0])
    want = softmax(LOGITS / 0.7)
    # 5 sigma of a binomial count, per token.
    tol = 5 * np.sqrt(draws * want * (1 - want)) + 1
    assert np.all(np.abs(counts - draws * want) <= tol), (counts, draws * want)


def test_processed_probs_is_tempered_softmax_without_filters():
    probs = sampler.processed_probs(LOGITS, SamplingParams(temperature=2.0))
    np.testing.assert_allclose(probs, softmax(LOGITS / 2.0), rtol=1e-6)


def test_top_k_keeps_the_k_largest():
    probs = sampler.processed_probs(LOGITS, SamplingParams(top_k=3))
    assert set(np.flatnonzero(probs)) == {1, 5, 2}
    want = softmax(LOGITS[[1, 5, 2]])
    np.testing.assert_allclose(probs[[1, 5, 2]], want, rtol=1e-6)
    tokens = {run(SamplingParams(top_k=3), index=i).token for i in range(300)}
    assert tokens == {1, 2, 5}


def test_top_k_ties_at_the_cut_keep_the_lower_id():
    logits = np.array([1.0, 2.0, 2.0, 2.0, 0.0], dtype=np.float32)
    probs = sampler.processed_probs(logits, SamplingParams(top_k=2))
    assert set(np.flatnonzero(probs)) == {1, 2}


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    p = softmax(LOGITS)
    order = np.argsort(-p)
    # a mass just above the two best tokens needs the third one too
    top_p = float(p[order[:2]].sum()) + 1e-3
    probs = sampler.processed_probs(LOGITS, SamplingParams(top_p=top_p))
    assert set(np.flatnonzero(probs)) == set(order[:3].tolist())
    # a tiny top_p keeps only the best token
    assert set(np.flatnonzero(sampler.processed_probs(LOGITS, SamplingParams(top_p=0.01)))) == {1}


def test_top_p_on_a_large_vocabulary_matches_a_full_sort():
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(49152) * 4).astype(np.float32)
    p = softmax(logits)
    for top_p in (0.3, 0.9, 0.999):
        order = np.argsort(-p, kind="stable")
        n_keep = int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1
        probs = sampler.processed_probs(logits, SamplingParams(top_p=top_p))
        assert set(np.flatnonzero(probs)) == set(order[:n_keep].tolist())


def test_min_p_drops_tokens_below_a_fraction_of_the_best():
    p = softmax(LOGITS)
    min_p = 0.5
    probs = sampler.processed_probs(LOGITS, SamplingParams(min_p=min_p))
    assert set(np.flatnonzero(probs)) == set(np.flatnonzero(p >= min_p * p.max()).tolist())
    assert 0 not in set(np.flatnonzero(probs)) and 1 in set(np.flatnonzero(probs))


def test_logit_bias_moves_the_biased_logit():
    params = SamplingParams(temperature=0.0, logit_bias=((6, 10.0),))
    assert run(params).token == 6
    got = sampler.processed_logits(LOGITS, SamplingParams(logit_bias=((3, -2.5),)))
    assert got[3] == pytest.approx(-3.5)
    np.testing.assert_array_equal(np.delete(got, 3), np.delete(LOGITS, 3))


def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits():
    params = SamplingParams(repetition_penalty=2.0)
    got = sampler.processed_logits(LOGITS, params, output_counts={1: 1}, prompt_tokens={3, 7})
    assert got[1] == pytest.approx(1.5)            # 3.0 / 2 (output token)
    assert got[3] == pytest.approx(-2.0)           # -1.0 * 2 (prompt token)
    assert got[7] == pytest.approx(0.75)           # 1.5 / 2 (prompt token)
    assert got[5] == LOGITS[5]                     # unseen: untouched


def test_presence_and_frequency_penalties_use_output_counts_only():
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    got = sampler.processed_logits(LOGITS, params, output_counts={1: 3, 2: 1, 4: 0},
                                   prompt_tokens={5})
    assert got[1] == pytest.approx(3.0 - 3 * 0.25 - 0.5)
    assert got[2] == pytest.approx(2.5 - 0.25 - 0.5)
    assert got[4] == LOGITS[4] and got[5] == LOGITS[5]


def test_penalties_change_the_greedy_choice():
    params = SamplingParams(temperature=0.0, presence_penalty=1.0)
    assert run(params, counts={1: 1}).token == 5    # 3.0 - 1 < 2.9


def test_suppressed_ids_are_never_chosen():
    assert run(SamplingParams(temperature=0.0), suppress=(1,)).token == 5
    tokens = {run(SamplingParams(temperature=5.0), index=i, suppress=(1, 5, 2)).token
              for i in range(500)}
    assert tokens and not tokens & {1, 5, 2}


def test_logprobs_are_log_softmax_of_raw_logits_and_top_sorted():
    params = SamplingParams(temperature=0.0, logprobs=True, top_logprobs=3,
                            logit_bias=((6, 100.0),))
    res = run(params)
    want = np.log(softmax(LOGITS))
    assert res.token == 6                           # chosen after the bias ...
    assert res.logprob == pytest.approx(want[6], abs=1e-9)   # ... reported from raw logits
    assert [t for t, _ in res.top_logprobs] == [1, 5, 2]
    for tok, lp in res.top_logprobs:
        assert lp == pytest.approx(want[tok], abs=1e-9)


def test_top_logprob_ties_are_ordered_by_id():
    logits = np.array([0.0, 2.0, 1.0, 2.0, 2.0], dtype=np.float32)
    res = run(SamplingParams(temperature=0.0, top_logprobs=2), logits)
    assert [t for t, _ in res.top_logprobs] == [1, 3]


def test_no_logprobs_when_not_asked():
    res = run(SamplingParams(temperature=1.0))
    assert res.logprob == 0.0 and res.top_logprobs == ()
    assert run(SamplingParams(logprobs=True)).logprob < 0.0


def test_sample_does_not_modify_the_caller_logits():
    logits = LOGITS.copy()
    run(SamplingParams(repetition_penalty=3.0, logit_bias=((0, 5.0),)), logits,
        counts={1: 2}, suppress=(2,))
    np.testing.assert_array_equal(logits, LOGITS)


def test_draw_is_inverse_cdf_in_id_order():
    probs = np.array([0.25, 0.0, 0.5, 0.25])
    seen = {sampler.draw(probs, seed=s, sample_index=0) for s in range(200)}
    assert seen == {0, 2, 3}
    u = np.random.default_rng([9, 4]).random()
    want = 0 if u < 0.25 else (2 if u < 0.75 else 3)
    assert sampler.draw(probs, seed=9, sample_index=4) == want
    assert math.isclose(sum(probs), 1.0)
