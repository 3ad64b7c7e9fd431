"""The speculation policy's parts on their own: the draft-length rule (with an injected step
cost), the suffix store's bound and choice of match, and the prediction cursor."""
from __future__ import annotations

import pytest

from engine.core.drafts.policy import (GUESS_MAX_DECODING, PRIOR_ACCEPTANCE, PREDICTION, PROMPT_LOOKUP,
                                       SPEC_MAX_DRAFT_TOKENS, Draft, DraftBatch,
                                       DraftPolicy, affine_step_s, draft_length)
from engine.core.drafts.prediction import PredictionTrack
from engine.core.drafts.suffix import SUFFIX_KEY_TOKENS, SuffixStore
from engine.core.sequence import Sequence
from engine.core.step_cost import MAX_TABLE_ROWS, RowCostTable, StepCostModel
from engine.types import GenRequest, SpeculativeConfig

FIXED_S, PER_ROW_S = 0.030, 0.002      # an injected step: 30 ms to read the weights, 2 ms a row


def test_the_rule_drafts_more_at_one_row_than_at_sixteen_and_none_when_drafts_miss():
    ratio = affine_step_s(PER_ROW_S / FIXED_S)
    one, sixteen = (draft_length(0.8, ratio, rows, SPEC_MAX_DRAFT_TOKENS) for rows in (1, 16))
    assert one > sixteen > 0
    assert draft_length(0.01, ratio, 1, SPEC_MAX_DRAFT_TOKENS) == 0
    assert draft_length(0.5, ratio, 128, SPEC_MAX_DRAFT_TOKENS) == 0     # compute-bound: no drafts
    assert draft_length(0.999, ratio, 1, SPEC_MAX_DRAFT_TOKENS) == SPEC_MAX_DRAFT_TOKENS
    assert draft_length(0.999, ratio, 1, 5) == 5                         # the room left caps it
    lengths = [draft_length(a / 10, ratio, 4, SPEC_MAX_DRAFT_TOKENS) for a in range(10)]
    assert lengths == sorted(lengths)                                    # surer sources draft more


def test_with_a_jump_from_one_row_to_two_only_sure_drafts_pay_and_then_many():
    """A gemm's step (2+ rows) costs 2.6x a gemv's (1 row), then little more per row: a
    draft or two never pays for the jump, a long sure draft does."""
    def jump(rows: int) -> float:
        return 1.0 if rows == 1 else 2.6 + 0.01 * rows
    assert draft_length(0.5, jump, 1, SPEC_MAX_DRAFT_TOKENS) == 0
    assert draft_length(0.95, jump, 1, SPEC_MAX_DRAFT_TOKENS) >= 16
    assert draft_length(0.7, jump, 1, 2) == 0                            # 1 + .7 + .49 tokens < 2.62x
    assert draft_length(0.7, jump, 1, SPEC_MAX_DRAFT_TOKENS) > 2         # ... but 8 drafts pay


def test_the_row_cost_table_keeps_the_shape_and_fills_the_gaps():
    table = RowCostTable()
    assert table.curve(0.1) is None
    for rows, step_s in ((1, 0.030), (4, 0.080), (8, 0.090)):
        table.observe(rows, step_s)
    table.observe(1000, 9.0)                                             # beyond the table: not kept
    curve = table.curve(0.1)
    assert len(curve) == MAX_TABLE_ROWS + 1
    assert curve[1] == 0.030 and curve[4] == 0.080 and curve[8] == 0.090
    assert curve[6] == pytest.approx(0.085)                              # between two counts seen
    assert curve[16] == pytest.approx(0.090 * (1 + 1.6) / (1 + 0.8))    # past them: the affine scale
    table.observe(1, 0.040)
    assert table.curve(0.1)[1] == pytest.approx(0.9 * 0.030 + 0.1 * 0.040)


def next_rate(policy: DraftPolicy, seq: Sequence, source: str) -> float:
    """The acceptance the policy gives `source`'s next drafted position for `seq`."""
    return policy.acceptances(seq, source, 1)[0]


def _learned_cost() -> StepCostModel:
    cost = StepCostModel()
    for step in range(40):
        rows = 1 + step % 32
        cost.observe(rows, FIXED_S + PER_ROW_S * rows)
    return cost


def _sequence(prediction: tuple[int, ...], seq_id: int = 0) -> Sequence:
    req = GenRequest(prompt=(1, 2, 3), max_tokens=200, prediction=prediction)
    seq = Sequence(seq_id, req, seed=0, arrival=seq_id, eos_ids=frozenset())
    seq.num_computed = len(seq.tokens) - 1                              # decoding
    return seq


def test_the_policy_uses_the_learned_step_cost_and_the_measured_acceptance():
    policy = DraftPolicy(SpeculativeConfig(method="prediction"), 512, step_cost=_learned_cost())
    assert policy.row_cost_ratio() == pytest.approx(PER_ROW_S / FIXED_S)
    prediction = tuple(range(10, 110))
    alone = policy.propose(_sequence(prediction), 1000, DraftBatch(1))
    crowded = policy.propose(_sequence(prediction, 1), 1000, DraftBatch(16))
    assert alone.source == crowded.source == PREDICTION
    assert alone.tokens[:len(crowded.tokens)] == crowded.tokens == prediction[:len(crowded.tokens)]
    assert len(alone.tokens) > len(crowded.tokens) > 0
    assert next_rate(policy, _sequence(prediction, 2), PREDICTION) == pytest.approx(PRIOR_ACCEPTANCE[PREDICTION])
    for _ in range(200):                                                # every draft misses at once
        policy.settle(_sequence(prediction, 3), alone, accepted=0, mismatched=True)
    assert next_rate(policy, _sequence(prediction, 4), PREDICTION) < 0.05
    assert policy.propose(_sequence(prediction, 5), 1000, DraftBatch(1)) is None
    assert policy.by_source() == ((PREDICTION, 200 * len(alone.tokens), 0),)


def test_the_suffix_store_stays_within_its_bound_and_forgets_the_oldest():
    store = SuffixStore(capacity_tokens=64)
    for doc in range(200):                                              # 200 x 11 tokens into 64
        store.add([doc % 7, 100 + doc, 1, 2, 3, 4, 5, 6, 7, 8, 1000 + doc])
        assert sum(len(positions) for positions in store._index.values()) <= 64    # index entries
        assert len(store._ring) == len(store._keys) == 64
    assert store.propose([5, 6, 7, 8], 3) == [1199]                     # the latest document's end
    assert store.propose([0, 100, 1], 2) == []                          # document 0 is gone
    assert store.propose([3, 299, 1], 4) == [2, 3, 4, 5]                # document 199 is kept


def test_the_suffix_store_continues_the_longest_agreement_then_the_most_recent():
    store = SuffixStore(capacity_tokens=1024)
    store.add([9, 8, 1, 2, 3, 40, 41])                  # agrees with the context over 5 tokens
    store.add([7, 1, 2, 3, 50, 51])                     # over 3 only, but newer
    store.add([6, 1, 2, 3, 60, 61])                     # over 3 only, newest
    assert store.propose([0, 9, 8, 1, 2, 3], 5) == [40, 41]             # the end of that document
    assert store.propose([0, 5, 5, 1, 2, 3], 5) == [60, 61]
    assert store.propose([1, 2], 5) == []                               # shorter than a key
    assert store.propose([0, 4, 2, 3], 5) == []
    assert SUFFIX_KEY_TOKENS == 3


def test_the_prediction_cursor_follows_diverges_and_realigns_forward():
    prediction = (1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 9, 9, 9)
    track = PredictionTrack(prediction)
    assert track.propose([100], 3) == [1, 2, 3]                         # the output's start
    track.follow([1, 2, 3, 4])
    assert track.propose([100, 1, 2, 3, 4], 2) == [5, 6]
    track.follow([1, 2, 3, 4, 77])                                      # the changed token
    assert track.propose([100, 1, 2, 3, 4, 77], 2) == []                # no agreement yet
    track.follow([1, 2, 3, 4, 77, 1, 2, 3])
    # "1 2 3" occurs at 0..2 and 8..10: the cursor (at 4) moves forward, after the second
    assert track.propose([100, 1, 2, 3, 4, 77, 1, 2, 3], 5) == [9, 9, 9]
    track.follow([1, 2, 3, 4, 77, 1, 2, 3, 9, 9, 9])
    assert track.propose([0], 4) == []                                  # the prediction is spent


def test_the_policy_learns_a_step_time_curve_from_the_decode_steps_it_is_shown():
    from engine.core.drafts.policy import PRIOR_ROW_COST_RATIO
    policy = DraftPolicy(SpeculativeConfig(method="prediction"), 512)
    for rows, step_s in ((1, 0.030), (2, 0.078), (8, 0.081), (16, 0.083)) * 3:
        policy.observe_step(rows, step_s)
    step_s = policy.step_seconds()
    assert step_s(1) == pytest.approx(0.030) and step_s(5) == pytest.approx(0.0795)
    assert draft_length(0.5, affine_step_s(PRIOR_ROW_COST_RATIO), 1, SPEC_MAX_DRAFT_TOKENS) > 0
    assert draft_length(0.5, step_s, 1, SPEC_MAX_DRAFT_TOKENS) == 0     # the jump to 2 rows: no
    assert draft_length(0.95, step_s, 1, SPEC_MAX_DRAFT_TOKENS) > 8


def test_a_source_right_for_a_long_run_drafts_long_though_it_missed_often_before():
    """Acceptance by streak: a prediction that missed at first and then was produced 40
    tokens in a row (an edit's answer back on the file) drafts long; a
    sequence just after a miss drafts less (its later positions, at streaks not measured
    yet, at the prior). One rate per source or per sequence (the misses
    averaged in) drafted 3-4 tokens inside such runs."""
    from engine.core.drafts.policy import STREAK_BUCKETS, streak_bucket
    assert [streak_bucket(s) for s in (0, 1, 2, 3, 4, 7, 8, 31, 32, 1000)] == [0, 1, 2, 2, 3, 3, 4, 5, 6, 6]
    assert streak_bucket(10 ** 6) == STREAK_BUCKETS - 1
    policy = DraftPolicy(SpeculativeConfig(method="prediction"), 512, step_cost=_learned_cost())
    prediction = tuple(range(10, 210))
    copying, after_miss = _sequence(prediction, 0), _sequence(prediction, 1)
    for _ in range(30):                                  # both sequences miss at once, often
        for seq in (copying, after_miss):
            policy.settle(seq, Draft(PREDICTION, (5, 6, 7)), accepted=0, mismatched=True)
    for _ in range(5):                                   # then one is produced 8 at a time
        policy.settle(copying, Draft(PREDICTION, tuple(range(8))), accepted=8, mismatched=False)
    assert next_rate(policy, after_miss, PREDICTION) < 0.3
    assert next_rate(policy, copying, PREDICTION) > 0.9
    run = policy.propose(copying, 1000, DraftBatch(1))
    unsure = policy.propose(after_miss, 1000, DraftBatch(1))
    assert run.source == PREDICTION and len(run.tokens) >= 16 and run.expected_tokens > 10
    assert unsure is None or unsure.expected_tokens < 1.0
    policy.settle(copying, run, accepted=3, mismatched=True)    # a miss ends the run
    assert next_rate(policy, copying, PREDICTION) == next_rate(policy, after_miss, PREDICTION)


def test_sequences_later_in_a_step_see_the_rows_the_earlier_ones_drafted():
    policy = DraftPolicy(SpeculativeConfig(method="prediction"), 512, step_cost=_learned_cost())
    batch = DraftBatch(16)
    lengths = [len(policy.propose(_sequence(tuple(range(10, 110)), i), 1000, batch).tokens) for i in range(4)]
    alone = [len(policy.propose(_sequence(tuple(range(10, 110)), 9), 1000, DraftBatch(16)).tokens)]
    assert lengths[0] == alone[0] and lengths == sorted(lengths, reverse=True) and lengths[-1] < lengths[0]
    assert batch.rows == 16 + sum(lengths)


def test_guesses_stop_above_eight_decoding_sequences_while_predictions_go_on():
    """Suffix and prompt-lookup drafts only while few sequences decode (chat at 16 streams
    lost 15% to them); a prediction still drafts in a crowded step."""
    policy = DraftPolicy(SpeculativeConfig(method="auto"), 512, step_cost=_learned_cost())
    repeating = Sequence(0, GenRequest(prompt=(5, 6, 7, 8, 9, 5, 6, 7), max_tokens=200), seed=0,
                         arrival=0, eos_ids=frozenset())
    repeating.num_computed = len(repeating.tokens) - 1
    for i in range(100):                                   # prompt lookup's drafts all hit
        policy.settle(_sequence((), 10 + i), Draft(PROMPT_LOOKUP, (1, 2, 3, 4)), accepted=4, mismatched=False)
    few = policy.propose(repeating, 1000, DraftBatch(GUESS_MAX_DECODING))
    assert few is not None and few.source == PROMPT_LOOKUP and few.tokens[0] == 8
    assert policy.propose(repeating, 1000, DraftBatch(GUESS_MAX_DECODING + 8)) is None
    crowded = policy.propose(_sequence(tuple(range(10, 110))), 1000, DraftBatch(GUESS_MAX_DECODING + 8))
    assert crowded is not None and crowded.source == PREDICTION


def test_the_draft_expected_to_give_the_most_tokens_wins_not_the_first_source_that_offers():
    """A sequence both a prediction and prompt lookup can draft for: the source whose
    measured acceptance makes its draft worth more takes the step, whichever comes first."""
    context = (5, 6, 7, 8, 9, 5, 6, 7)                       # prompt lookup drafts 8, 9, 5, ...
    prediction = (8, 9, 5, 6, 7)                             # the prediction drafts the same

    def decoding(seq_id: int) -> Sequence:
        seq = Sequence(seq_id, GenRequest(prompt=context, max_tokens=200, prediction=prediction),
                       seed=0, arrival=seq_id, eos_ids=frozenset())
        seq.num_computed = len(seq.tokens) - 1
        return seq

    policy = DraftPolicy(SpeculativeConfig(method="auto"), 512, step_cost=_learned_cost())
    assert policy.propose(decoding(0), 1000, DraftBatch(1)).source == PREDICTION   # priors: 0.9 > 0.5
    for i in range(300):                                     # then predictions half hold, lookups hold
        policy.settle(decoding(10 + i), Draft(PREDICTION, (1, 2, 3)), accepted=i % 2, mismatched=True)
        policy.settle(decoding(400 + i), Draft(PROMPT_LOOKUP, (1, 2, 3, 4)), accepted=4, mismatched=False)
    assert 0.4 < next_rate(policy, decoding(1), PREDICTION) < 0.6    # still worth a draft alone ...
    chosen = policy.propose(decoding(1), 1000, DraftBatch(1))
    assert chosen is not None and chosen.source == PROMPT_LOOKUP and chosen.tokens[:2] == (8, 9)


def test_a_streak_not_measured_yet_halves_the_miss_rate_of_the_one_below():
    """Acceptance rises with the streak (edit task: prompt lookup 0.55 at streak 0, 0.95 at
    8-15, 1.0 past 16), so an unmeasured bucket's prior is the bucket below's with half the
    misses, not the source's flat prior: a loop 40 tokens long drafts long on a cold server."""
    from engine.core.drafts.policy import STREAK_BUCKETS
    policy = DraftPolicy(SpeculativeConfig(method="prompt_lookup"), 512)
    rates = policy.bucket_rates(PROMPT_LOOKUP)
    assert len(rates) == STREAK_BUCKETS and rates[0] == PRIOR_ACCEPTANCE[PROMPT_LOOKUP]
    assert rates[1] == pytest.approx(1 - (1 - rates[0]) / 2) and rates == sorted(rates) and rates[-1] > 0.98
    for i in range(100):                                  # streak 0 measured: always missed
        policy.settle(_sequence((), i), Draft(PROMPT_LOOKUP, (1, 2)), accepted=0, mismatched=True)
    measured = policy.bucket_rates(PROMPT_LOOKUP)
    assert measured[0] < 0.05 and measured[1] == pytest.approx(1 - (1 - measured[0]) / 2)
