"""n > 1 forks (GenRequest.wait_for_prefix): the prompt is computed once, the other choices
wait for its whole blocks and take them from the prefix cache (shared, not copied)."""
from __future__ import annotations

import numpy as np

from engine.api import EngineConfig, GenRequest, SamplingParams
from engine.core.engine import Engine
from tests.engine.core.engine_models import GREEDY, random_model, run_to_completion, tokens_of

BLOCK = 4


def _prompt(n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(n).integers(0, 64, n))


def test_forks_compute_the_prompt_once_and_share_its_whole_blocks():
    model = random_model(vocab=64, seed=5)
    prompt = _prompt(37)                                   # 9 whole blocks + a 1-token tail
    engine = Engine(model, EngineConfig(block_size=BLOCK, num_kv_blocks=64, prefill_chunk=8))
    ids = [engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=5,
                                         wait_for_prefix=j > 0)) for j in range(3)]
    outs = run_to_completion(engine)
    stats = engine.stats()
    shared_tokens = (len(prompt) - 1) // BLOCK * BLOCK     # 36
    assert stats.prompt_tokens == 3 * len(prompt)
    assert stats.prefix_hit_tokens == 2 * shared_tokens   # the forks computed only their tails
    assert tokens_of(outs[ids[0]]) == tokens_of(outs[ids[1]]) == tokens_of(outs[ids[2]])
    assert engine.stats().kv_blocks_used == 0


def test_without_the_flag_identical_prompts_in_one_step_both_compute():
    model = random_model(vocab=64, seed=5)
    prompt = _prompt(37)
    engine = Engine(model, EngineConfig(block_size=BLOCK, num_kv_blocks=64, prefill_chunk=8))
    for _ in range(2):
        engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=2))
    run_to_completion(engine)
    assert engine.stats().prefix_hit_tokens == 0


def test_a_fork_does_not_hold_up_unrelated_requests_and_samples_like_alone():
    model = random_model(vocab=64, seed=6)
    prompt, other = _prompt(30), _prompt(11)
    params = SamplingParams(temperature=1.0)
    engine = Engine(model, EngineConfig(block_size=BLOCK, num_kv_blocks=64, prefill_chunk=4))
    lead = engine.add_request(GenRequest(prompt=prompt, params=params, seed=7, max_tokens=4))
    fork = engine.add_request(GenRequest(prompt=prompt, params=params, seed=8, max_tokens=4,
                                         wait_for_prefix=True))
    third = engine.add_request(GenRequest(prompt=other, params=GREEDY, max_tokens=1))
    engine.step()
    assert [s.id for s in engine.scheduler.waiting] == [fork]       # the fork waits ...
    assert {s.id for s in engine.scheduler.running} == {lead, third}  # ... others go past it
    outs = run_to_completion(engine)
    alone = Engine(model, EngineConfig(block_size=BLOCK, num_kv_blocks=64))
    rid = alone.add_request(GenRequest(prompt=prompt, params=params, seed=8, max_tokens=4))
    assert tokens_of(outs[fork]) == tokens_of(run_to_completion(alone)[rid])
    assert outs[lead] and engine.stats().prefix_hit_tokens == (len(prompt) - 1) // BLOCK * BLOCK
