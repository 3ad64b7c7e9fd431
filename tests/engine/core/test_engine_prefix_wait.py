"""Requests that arrive together on a new shared prefix compute it once: each waits while a
running sequence computes the whole blocks they share (at least PREFIX_WAIT_MIN_TOKENS of
them), then takes them from the prefix cache. A short common start is not worth a step."""
from __future__ import annotations

import numpy as np

from engine.api import EngineConfig, GenRequest
from engine.core.engine import Engine
from engine.core.scheduler import PREFIX_WAIT_MIN_TOKENS
from tests.engine.core.engine_models import GREEDY, random_model, run_to_completion, tokens_of

BLOCK = 4


def _tokens(seed: int, n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(seed).integers(0, 64, n))


def _engine(model, **overrides) -> Engine:
    config = dict(block_size=BLOCK, num_kv_blocks=256, prefill_chunk=512, max_model_len=256)
    config.update(overrides)
    return Engine(model, EngineConfig(**config))


def test_simultaneous_requests_on_a_new_long_prefix_compute_it_once():
    model = random_model(vocab=64, seed=21)
    prefix = _tokens(1, PREFIX_WAIT_MIN_TOKENS + 2 * BLOCK)              # whole blocks, in flight
    prompts = [prefix + _tokens(10 + i, 5) for i in range(4)]
    engine = _engine(model)
    ids = [engine.add_request(GenRequest(prompt=p, params=GREEDY, max_tokens=3)) for p in prompts]
    first = engine.step()
    assert [s.id for s in engine.scheduler.running] == ids[:1]           # the others wait a step
    outs = run_to_completion(engine)
    for out in first:
        outs[out.id].insert(0, out)
    stats = engine.stats()
    assert stats.prefix_waits_total == 3
    assert stats.prefix_hit_tokens == 3 * len(prefix)                    # computed once, shared thrice
    for rid, prompt in zip(ids, prompts):                                # and the same answers as alone
        alone = _engine(model)
        one = alone.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=3))
        assert tokens_of(outs[rid]) == tokens_of(run_to_completion(alone)[one])
    assert stats.kv_blocks_used == 0


def test_a_short_common_start_does_not_make_requests_wait():
    model = random_model(vocab=64, seed=22)
    start = _tokens(2, 2 * BLOCK)                                        # well under the threshold
    assert len(start) < PREFIX_WAIT_MIN_TOKENS
    engine = _engine(model)
    ids = [engine.add_request(GenRequest(prompt=start + _tokens(20 + i, 30), params=GREEDY,
                                         max_tokens=2)) for i in range(3)]
    engine.step()
    assert [s.id for s in engine.scheduler.running] == ids               # all in the first step
    run_to_completion(engine)
    assert engine.stats().prefix_waits_total == 0


def test_a_waiting_request_does_not_hold_up_unrelated_ones():
    model = random_model(vocab=64, seed=23)
    prefix = _tokens(3, PREFIX_WAIT_MIN_TOKENS)
    engine = _engine(model)
    lead = engine.add_request(GenRequest(prompt=prefix + _tokens(30, 3), params=GREEDY, max_tokens=2))
    follower = engine.add_request(GenRequest(prompt=prefix + _tokens(31, 3), params=GREEDY, max_tokens=2))
    other = engine.add_request(GenRequest(prompt=_tokens(32, 40), params=GREEDY, max_tokens=2))
    engine.step()
    assert [s.id for s in engine.scheduler.waiting] == [follower]
    assert {s.id for s in engine.scheduler.running} == {lead, other}
    engine.step()                                                        # the prefix is in the tree now
    assert follower in {s.id for s in engine.scheduler.running}
    run_to_completion(engine)
    assert engine.stats().prefix_hit_tokens == len(prefix)
