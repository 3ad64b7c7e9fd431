"""The grammar's mask comes BEFORE top_k/top_p/min_p (engine/core/guided.py): the filters are
defined on the masked distribution. From a fixed logits row whose best token the grammar
forbids, a guided draw with top_p (or min_p, or top_k 1) must only ever return the best
allowed token; filtering first would keep only the forbidden token and leave nothing."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.core.guided import sample_guided
from engine.grammar.compile import GrammarCache, GrammarSpec
from engine.grammar.constraint import Constraint, GrammarRuntime
from engine.grammar.vocab import build_table
from engine.types import SamplingParams

VOCAB = [b"a", b"b", b"c", b"d", b"<eos>"]
EOS = 4
# "a" is the best token and forbidden; among the allowed, "b" holds ~62% of the masked mass
LOGITS = np.array([10.0, 5.0, 4.5, 0.0, -5.0], dtype=np.float32)         # [V]
BEST_ALLOWED = 1


def constraint() -> Constraint:
    table = build_table(VOCAB, special_ids=set(), eos_ids={EOS})
    grammar = GrammarCache().get(GrammarSpec("choice", json.dumps(["b", "c", "d"])))
    return Constraint(GrammarRuntime(grammar, table))


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0, top_p=0.6),
                                    SamplingParams(temperature=1.0, min_p=0.7),
                                    SamplingParams(temperature=1.0, top_k=1)])
def test_a_filtered_guided_draw_only_returns_the_best_allowed_token(params):
    guide = constraint()
    drawn = {sample_guided(LOGITS, params, guide, seed=seed, sample_index=0, output_counts={}).token
             for seed in range(64)}
    assert drawn == {BEST_ALLOWED}


def test_without_filters_the_allowed_tokens_all_occur():
    guide = constraint()
    drawn = {sample_guided(LOGITS, SamplingParams(temperature=1.0), guide, seed=seed, sample_index=0,
                           output_counts={}).token for seed in range(256)}
    assert BEST_ALLOWED in drawn and drawn <= {1, 2, 3} and len(drawn) >= 2    # the test's row can tell the two apart
