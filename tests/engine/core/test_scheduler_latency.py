"""The latency policy: while a running sequence decodes, a step's prompt rows stay within
an allowance (decode rows first, never cut): what keeps the step within `itl_target_ms` by
the learned step cost, at least `tokens_beside_decode`; with nobody decoding, steps of that
size too, but one prompt always gets a whole chunk. A decoding stream then gets a token
every step while long prompts arrive."""
from __future__ import annotations

import numpy as np

from engine.api import EngineConfig, GenRequest
from engine.core.engine import Engine
from engine.core.step_cost import MIN_STEPS_OBSERVED, StepCostModel
from tests.engine.core.engine_models import GREEDY, dense_greedy, random_model

BESIDE = 5


def _prompt(seed: int, n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in np.random.default_rng(seed).integers(0, 64, n))


def _engine(model) -> Engine:
    return Engine(model, EngineConfig(block_size=4, num_kv_blocks=200, prefill_chunk=32,
                                      max_batched_tokens=64, tokens_beside_decode=BESIDE,
                                      itl_target_ms=0))          # the fixed allowance only


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


# --------------------------------------------------------------------------- the learned step cost

def _fed(fixed_s: float, per_row_s: float, rows=(8, 40, 16, 64, 24, 100, 10, 70, 30, 90)) -> StepCostModel:
    model = StepCostModel()
    for n in rows:
        model.observe(n, fixed_s + per_row_s * n)
    return model


def test_the_step_cost_fit_recovers_an_affine_step_time():
    fixed_s, per_row_s = _fed(0.030, 0.002).fit()
    assert abs(fixed_s - 0.030) < 1e-9 and abs(per_row_s - 0.002) < 1e-12
    assert _fed(0.030, 0.002).rows_within(0.5) == 235                 # (0.5 - 0.03) / 0.002
    assert _fed(0.030, 0.002, rows=(8,) * 20).rows_within(0.5) is None    # no spread: no slope
    assert _fed(0.030, 0.002, rows=(8, 40, 16)).rows_within(0.5) is None  # too few steps
    assert MIN_STEPS_OBSERVED > 3
    flat = StepCostModel()
    for n in (8, 40, 16, 64, 24, 100, 10, 70, 30, 90):
        flat.observe(n, 0.0)                                           # a clock that never moves
    assert flat.rows_within(0.5) is None


def test_with_a_learned_cost_the_allowance_is_what_fits_the_target_beside_the_decodes():
    model = random_model(seed=34)
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=200, max_batched_tokens=512,
                                        tokens_beside_decode=BESIDE, itl_target_ms=500))
    for i in range(3):
        engine.add_request(GenRequest(prompt=_prompt(40 + i, 4), params=GREEDY, max_tokens=30))
    engine.step()                                                      # all three decode now
    engine.scheduler.step_cost = _fed(0.030, 0.002)                    # 235 rows within 0.5 s
    assert engine.scheduler.prefill_allowance() == 235 - 3
    engine.scheduler.step_cost = _fed(0.450, 0.002)                    # a slow machine: 25 rows
    assert engine.scheduler.prefill_allowance() == 25 - 3
    engine.scheduler.step_cost = _fed(0.499, 0.002)                    # nothing fits: the floor
    assert engine.scheduler.prefill_allowance() == BESIDE
    engine.scheduler.step_cost = _fed(0.0001, 0.00001)                 # everything fits: the step
    assert engine.scheduler.prefill_allowance() == 512


def test_with_nobody_decoding_a_burst_shares_steps_of_the_policy_size_and_one_prompt_a_chunk():
    model = random_model(seed=35)
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=400, max_batched_tokens=512,
                                        prefill_chunk=64, tokens_beside_decode=BESIDE,
                                        itl_target_ms=500))
    engine.scheduler.step_cost = _fed(0.030, 0.002)                    # 235 rows within 0.5 s
    assert engine.scheduler.prefill_allowance() == 235                 # not the whole 512
    for i in range(8):                                                 # 8 x 40 = 320 prompt rows
        engine.add_request(GenRequest(prompt=_prompt(50 + i, 40), params=GREEDY, max_tokens=2))
    plan = engine.scheduler.schedule()
    assert plan.prefill_tokens == 235                                  # the first answer sooner
    # a slow machine: the allowance is below one chunk, and a prompt still takes its chunk
    alone = Engine(model, EngineConfig(block_size=4, num_kv_blocks=400, max_batched_tokens=512,
                                       prefill_chunk=64, itl_target_ms=500))
    alone.scheduler.step_cost = _fed(0.450, 0.002)                     # 25 rows within 0.5 s
    alone.add_request(GenRequest(prompt=_prompt(60, 100), params=GREEDY, max_tokens=2))
    assert alone.scheduler.schedule().prefill_tokens == 64
