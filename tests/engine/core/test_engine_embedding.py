"""Embeddings packed into engine steps (engine/core/embedding.py): equal to the dense
reference (one forward per input), within the step's token budget beside running
generations, no KV kept after, and cancellable."""
import numpy as np
import pytest

from engine.api import EngineConfig, GenRequest, InvalidRequest, PromptTooLong
from engine.core.engine import Engine
from tests.engine.core.engine_models import (GREEDY, dense_embeddings, dense_greedy, random_model,
                                             run_embeddings, tokens_of)

INPUTS = [[1, 2, 3], [9], list(range(5, 30)), [4, 4, 4, 4, 4, 4, 4, 4], list(range(40, 57))]


@pytest.fixture(scope="module")
def model():
    return random_model()


@pytest.mark.parametrize("chunk, budget", [(512, 2048), (4, 6), (1, 3)])
def test_packed_embeddings_equal_one_dense_forward_per_input(model, chunk, budget):
    reference = dense_embeddings(model, INPUTS)                          # [n, d]
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=64, prefill_chunk=chunk,
                                        max_batched_tokens=budget))
    vectors = run_embeddings(engine, INPUTS)
    np.testing.assert_allclose(vectors, reference, atol=2e-5)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    stats = engine.stats()
    assert stats.kv_blocks_used == 0 and stats.kv_blocks_cached == 0   # no KV kept after
    assert not engine.has_work()


def test_embeddings_share_steps_with_a_decode_within_the_token_budget(model):
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=64, prefill_chunk=4,
                                        max_batched_tokens=6))
    prompt = (3, 1, 4, 1, 5)
    rid = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=12))
    engine.step(); engine.step()                                          # prefilled, decoding
    job = engine.add_embedding([list(range(1, 40))] * 3)
    produced, finished = [], []
    while engine.has_work():
        outs = engine.step()
        assert engine.stats().batch_tokens <= 6
        mine = [o for o in outs if o.id == rid]
        if len(produced) < 10:
            assert len(mine) == 1                                         # one token every step
        produced += mine
        finished += engine.take_embeddings()
    assert [d.job_id for d in finished] == [job]
    assert tokens_of(produced)[-10:] == dense_greedy(model, prompt, 12)[-10:]
    np.testing.assert_allclose(finished[0].vectors, dense_embeddings(model, [list(range(1, 40))] * 3),
                               atol=2e-5)
    assert engine.stats().kv_blocks_used == 0


def test_cancel_releases_a_jobs_blocks_and_bad_inputs_are_refused(model):
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=16, prefill_chunk=4,
                                        max_batched_tokens=8, max_model_len=40))
    job = engine.add_embedding([list(range(1, 30)), list(range(1, 9))])
    engine.step()
    assert engine.stats().kv_blocks_used > 0
    engine.cancel_embedding(job)
    assert engine.stats().kv_blocks_used == 0 and not engine.has_work()
    engine.step()
    assert engine.take_embeddings() == []
    with pytest.raises(InvalidRequest):
        engine.add_embedding([[1], []])
    with pytest.raises(PromptTooLong):
        engine.add_embedding([list(range(41))])


def test_while_a_token_is_awaited_embeddings_add_at_most_their_cap_to_a_step(model):
    """The step is a chat's inter-token gap: beside a decode, embedding rows are capped at
    the latency policy's tokens_beside_decode; with nothing sampled they take the whole budget."""
    CAP = 128
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=400, prefill_chunk=64,
                                        max_batched_tokens=4 * CAP, tokens_beside_decode=CAP,
                                        itl_target_ms=0))        # the fixed allowance only
    engine.add_embedding([list(range(1, 60))] * 12)
    engine.step()
    assert engine.stats().batch_tokens > CAP                  # alone: the whole budget
    rid = engine.add_request(GenRequest(prompt=(3, 1, 4), params=GREEDY, max_tokens=40))
    decoding = 0
    while engine.has_work() and decoding < 5:
        outs = engine.step()
        if any(o.id == rid and o.token is not None for o in outs):
            decoding += 1
            assert engine.stats().batch_tokens <= 3 + CAP     # its prompt or decode rows + the cap
        engine.take_embeddings()
