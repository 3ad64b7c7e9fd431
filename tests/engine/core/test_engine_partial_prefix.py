"""Prefix hits exact to the token: a prompt that leaves the cached path inside a block copies
the cached block's matching rows instead of computing them again."""
from __future__ import annotations

import numpy as np

from engine.api import EngineConfig, GenRequest
from engine.core.engine import Engine
from engine.model import llama
from tests.engine.core.engine_models import GREEDY, dense_greedy, random_model, run_to_completion, tokens_of

BS = 4


def test_a_question_after_a_cached_system_prompt_computes_only_its_own_tokens():
    model = random_model()
    system = tuple(range(3, 13))                       # 10 tokens: 2 full blocks + 2 of the third
    first_prompt, second_prompt = system + (40, 41, 42), system + (50, 51, 52, 53)
    engine = Engine(model, EngineConfig(block_size=BS, num_kv_blocks=64))
    first = engine.add_request(GenRequest(prompt=first_prompt, params=GREEDY, max_tokens=4))
    assert tokens_of(run_to_completion(engine)[first]) == dense_greedy(model, first_prompt, 4)
    hits_before = engine.stats().prefix_hit_tokens
    second = engine.add_request(GenRequest(prompt=second_prompt, params=GREEDY, max_tokens=4))
    plan_copies = []
    original = engine.scheduler.schedule

    def schedule():
        plan = original()
        plan_copies.extend(plan.copies)
        return plan
    engine.scheduler.schedule = schedule
    outs = run_to_completion(engine)
    assert tokens_of(outs[second]) == dense_greedy(model, second_prompt, 4)
    assert engine.stats().prefix_hit_tokens - hits_before == len(system)
    # the third block's two system rows were copied, not shared: that block also holds 40, 41
    assert [c.num_tokens for c in plan_copies] == [len(system) - 2 * BS]
    assert engine.stats().kv_blocks_used == 0
    # the copied block holds the K/V the dense reference computes at positions 8..11
    cache = llama.DenseCache(model.config)
    llama.forward_cached(model.config, model.weights, second_prompt, cache)
    dst = plan_copies[0].dst_block
    for layer in range(model.config.num_layers):
        np.testing.assert_allclose(engine.kv.k[layer][dst], cache.k[layer][8:12], atol=1e-5)
        np.testing.assert_allclose(engine.kv.v[layer][dst], cache.v[layer][8:12], atol=1e-5)


def test_the_copy_is_exact_and_the_source_block_stays_unchanged():
    model = random_model()
    engine = Engine(model, EngineConfig(block_size=BS, num_kv_blocks=16))
    k_before = [k.copy() for k in engine.kv.k]
    engine.kv.k[0][5] = np.arange(engine.kv.k[0][5].size, dtype=np.float32).reshape(engine.kv.k[0][5].shape)
    engine.kv.copy_rows(5, 9, 3)
    assert np.array_equal(engine.kv.k[0][9, :3], engine.kv.k[0][5, :3])
    assert np.array_equal(engine.kv.k[0][9, 3:], k_before[0][9, 3:])      # rows past n untouched


def test_a_partial_hit_under_block_pressure_still_equals_the_dense_answers():
    """A pool so small that taking the copy's block evicts cached leaves (maybe the source:
    then the block is handed back to the copier with its rows intact)."""
    model = random_model()
    system = tuple(range(3, 10))                       # 7 tokens: 1 full block + 3
    prompts = [system + tuple(range(20 + 5 * i, 23 + 5 * i)) for i in range(6)]
    engine = Engine(model, EngineConfig(block_size=BS, num_kv_blocks=8, max_num_seqs=2))
    for prompt in prompts:
        rid = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=6))
        assert tokens_of(run_to_completion(engine)[rid]) == dense_greedy(model, prompt, 6)
    assert engine.stats().evictions_total > 0
    assert engine.stats().prefix_hit_tokens > 0
