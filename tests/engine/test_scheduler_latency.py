"""The latency policy: while a running sequence decodes, a step's prompt rows stay within
`tokens_beside_decode` (decode rows first, never cut); with nobody decoding a prompt may
fill the step. A decoding stream then gets a token every step while long prompts arrive."""
from __future__ import annotations

import numpy as np

from engine.api import EngineConfig, GenRequest
from engine.core.engine import Engine
from tests.engine.engine_models import GREEDY, dense_greedy, random_model

BESIDE = 5


def _prompt(seed: int, n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(seed).integers(0, 64, n))


def _engine(model) -> Engine:
    return Engine(model, EngineConfig(block_size=4, num_kv_blocks=200, prefill_chunk=32,
                                      max_batched_tokens=64, tokens_beside_decode=BESIDE))


def test_alone_a_prompt_takes_a_whole_chunk():
    engine = _engine(random_model(seed=31))
    engine.add_request(GenRequest(prompt=_prompt(1, 40), params=GREEDY, max_tokens=2))
    plan = engine.scheduler.schedule()
    assert plan.prefill_tokens == 32 and plan.scheduled[0].num_tokens == 32


def test_beside_a_decode_prompts_come_in_pieces_and_the_decode_never_misses_a_step():
    model = random_model(seed=32)
    engine = _engine(model)
    stream_prompt, long_prompt = _prompt(2, 6), _prompt(3, 30)
    stream = engine.add_request(GenRequest(prompt=stream_prompt, params=GREEDY, max_tokens=20))
    engine.step()                                         # its prompt; now it decodes
    late = [engine.add_request(GenRequest(prompt=long_prompt, params=GREEDY, max_tokens=3)),
            engine.add_request(GenRequest(prompt=_prompt(4, 9), params=GREEDY, max_tokens=3))]
    got: dict[int, list[int]] = {}
    for _ in range(10):                                   # both prompts arrive while it decodes
        assert engine.scheduler.prefill_allowance() == BESIDE
        decoding = sum(s.num_uncomputed == 1 for s in engine.scheduler.running)
        outs = engine.step()
        assert engine.stats().batch_tokens <= decoding + BESIDE   # decode rows + the allowance
        assert [o.id for o in outs].count(stream) == 1    # a token every step
        for o in outs:
            got.setdefault(o.id, []).append(o.token)
    while engine.has_work():
        for o in engine.step():
            got.setdefault(o.id, []).append(o.token)
    assert got[late[0]] == dense_greedy(model, long_prompt, 3)       # same answers, in pieces
    assert len(got[stream]) == 19 and engine.stats().kv_blocks_used == 0


def test_the_allowance_never_exceeds_the_step():
    model = random_model(seed=33)
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=200, max_batched_tokens=8,
                                        tokens_beside_decode=100))
    engine.add_request(GenRequest(prompt=_prompt(5, 3), params=GREEDY, max_tokens=5))
    engine.step()
    assert engine.scheduler.prefill_allowance() == 8
