"""Seeded sampling is a pure function of (seed, sample index): batch mates, chunked prefill
and preemption never change a seeded result; logprobs come from the raw logits."""
import random

import numpy as np

from engine.api import EngineConfig, GenRequest, SamplingParams
from engine.core.engine import Engine
from tests.engine.core.engine_models import logits_of, random_model, run_to_completion, tokens_of

MODEL = random_model(seed=11)
HOT = SamplingParams(temperature=1.0, top_p=0.95)
PROMPT = (4, 8, 15, 16, 23, 42, 4, 8)


def sample_alone(seed=42, **config):
    engine = Engine(MODEL, EngineConfig(block_size=4, num_kv_blocks=64, **config))
    rid = engine.add_request(GenRequest(prompt=PROMPT, params=HOT, seed=seed, max_tokens=16))
    return tokens_of(run_to_completion(engine)[rid])


def test_seeded_sample_equals_itself_among_batch_mates_and_with_chunked_prefill():
    alone = sample_alone()
    engine = Engine(MODEL, EngineConfig(block_size=4, num_kv_blocks=64, prefill_chunk=3,
                                        max_batched_tokens=10))
    rng = np.random.default_rng(0)
    for i in range(5):
        engine.add_request(GenRequest(prompt=tuple(int(t) for t in rng.integers(0, 64, 5 + i)),
                                      params=HOT, seed=i, max_tokens=10))
    rid = engine.add_request(GenRequest(prompt=PROMPT, params=HOT, seed=42, max_tokens=16))
    assert tokens_of(run_to_completion(engine)[rid]) == alone


def test_seeded_sample_survives_preemption():
    alone = sample_alone()
    engine = Engine(MODEL, EngineConfig(block_size=4, num_kv_blocks=7, prefix_cache="none"))
    first = engine.add_request(GenRequest(prompt=(1, 2, 3, 5, 6), params=HOT, seed=1, max_tokens=14))
    rid = engine.add_request(GenRequest(prompt=PROMPT, params=HOT, seed=42, max_tokens=16))
    outs = run_to_completion(engine)
    assert engine.stats().preemptions_total >= 1
    assert tokens_of(outs[rid]) == alone
    assert len(outs[first]) == 14


def test_other_seeds_give_other_samples():
    assert sample_alone(seed=1) != sample_alone(seed=2)


def test_requests_without_a_seed_draw_one_from_the_injected_rng():
    def run(rng):
        engine = Engine(MODEL, EngineConfig(block_size=4, num_kv_blocks=64), rng=rng)
        rid = engine.add_request(GenRequest(prompt=PROMPT, params=HOT, max_tokens=16))
        return tokens_of(run_to_completion(engine)[rid])
    assert run(random.Random(7)) == run(random.Random(7))
    assert run(random.Random(7)) == sample_alone(seed=random.Random(7).getrandbits(63))


def test_logprobs_are_those_of_the_raw_logits():
    params = SamplingParams(temperature=0.0, logprobs=True, top_logprobs=3)
    engine = Engine(MODEL, EngineConfig(block_size=4, num_kv_blocks=64))
    rid = engine.add_request(GenRequest(prompt=PROMPT, params=params, max_tokens=3))
    outs = run_to_completion(engine)[rid]
    ids = list(PROMPT) + tokens_of(outs)
    logits = logits_of(MODEL, ids)                                        # [n, V]
    for j, out in enumerate(outs):
        row = logits[len(PROMPT) - 1 + j].astype(np.float64)
        want = row - row.max() - np.log(np.exp(row - row.max()).sum())    # log_softmax, by hand
        assert out.token == int(np.argmax(want))
        assert abs(out.logprob - want[out.token]) < 1e-3
        assert [t for t, _ in out.top_logprobs] == list(np.argsort(-want)[:3])
