"""The engine end to end against the dense reference: batching, chunking, prefix cache, limits."""
import numpy as np
import pytest

from engine.model import llama
from engine.api import (FINISH_LENGTH, FINISH_STOP, EngineConfig, GenRequest, InvalidRequest,
                        PromptTooLong, SamplingParams, check_context)
from engine.core.engine import Engine
from tests.engine.core.engine_models import (GREEDY, dense_greedy, random_model, run_to_completion,
                                        succ_model, tokens_of)



@pytest.fixture(scope="module")
def model():
    return random_model()


def prompts(seed, lengths, vocab=64):
    rng = np.random.default_rng(seed)
    return [tuple(int(t) for t in rng.integers(0, vocab, n)) for n in lengths]


def run_greedy(model, config, prompt_list, max_tokens):
    engine = Engine(model, config)
    ids = [engine.add_request(GenRequest(prompt=p, params=GREEDY, max_tokens=m))
           for p, m in zip(prompt_list, max_tokens)]
    outs = run_to_completion(engine)
    return engine, [tokens_of(outs[i]) for i in ids]


def test_many_concurrent_requests_of_mixed_lengths_equal_dense(model):
    plist = prompts(1, [1, 2, 5, 9, 16, 17, 33, 4, 40, 3, 8, 12])
    maxes = [12, 3, 20, 7, 9, 15, 4, 11, 6, 18, 10, 5]
    engine, got = run_greedy(model, EngineConfig(block_size=4, num_kv_blocks=256, max_num_seqs=8,
                                                 max_batched_tokens=48, prefill_chunk=16), plist, maxes)
    for p, m, g in zip(plist, maxes, got):
        assert g == dense_greedy(model, p, m)
    assert engine.stats().kv_blocks_used == 0


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_chunked_prefill_equals_whole_prefill(model, chunk):
    plist = prompts(2, [23, 11, 30])
    config = EngineConfig(block_size=4, num_kv_blocks=128)
    _, whole = run_greedy(model, config, plist, [8, 8, 8])
    _, chunked = run_greedy(model, EngineConfig(block_size=4, num_kv_blocks=128, prefill_chunk=chunk),
                            plist, [8, 8, 8])
    assert chunked == whole == [dense_greedy(model, p, 8) for p in plist]


def test_prefix_cache_on_and_off_give_the_same_tokens_and_hits_are_counted(model):
    system = prompts(3, [21])[0]
    plist = [system + tail for tail in prompts(4, [3, 5, 2, 7])]
    results = {}
    for mode in ("radix", "none"):
        engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=128, prefix_cache=mode))
        first = engine.add_request(GenRequest(prompt=plist[0], params=GREEDY, max_tokens=6))
        outs = run_to_completion(engine)                        # the first finishes, then the rest
        ids = [engine.add_request(GenRequest(prompt=p, params=GREEDY, max_tokens=6)) for p in plist[1:]]
        outs.update(run_to_completion(engine))
        results[mode] = [tokens_of(outs[i]) for i in [first] + ids]
        stats = engine.stats()
        assert stats.prompt_tokens == sum(map(len, plist))
        if mode == "radix":
            # the whole 21-token system prompt: 5 shared blocks, and its last token copied
            # from the first request's 6th block (the tails differ from their first token)
            assert len({p[len(system)] for p in plist}) == len(plist)
            assert stats.prefix_hit_tokens == 3 * len(system)
            assert stats.prefix_hit_ratio == pytest.approx(3 * len(system) / stats.prompt_tokens)
            assert stats.kv_blocks_cached > 0
        else:
            assert stats.prefix_hit_tokens == 0 and stats.kv_blocks_cached == 0
        assert stats.kv_blocks_used == 0
    assert results["radix"] == results["none"] == [dense_greedy(model, p, 6) for p in plist]


def test_concurrent_requests_share_blocks_committed_while_running(model):
    system = prompts(5, [16])[0]
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=64))
    a = engine.add_request(GenRequest(prompt=system + (1,), params=GREEDY, max_tokens=20))
    first = engine.step()                                      # a's prompt is cached now
    b = engine.add_request(GenRequest(prompt=system + (2,), params=GREEDY, max_tokens=4))
    outs = run_to_completion(engine)
    assert engine.stats().prefix_hit_tokens == 16
    assert tokens_of(first + outs[a]) == dense_greedy(model, system + (1,), 20)
    assert tokens_of(outs[b]) == dense_greedy(model, system + (2,), 4)


def test_hand_example_succ_model_prefills_a_and_decodes_b_c_d():
    engine = Engine(succ_model())
    rid = engine.add_request(GenRequest(prompt=(97,), params=GREEDY, max_tokens=3))
    outs = run_to_completion(engine)[rid]
    assert [o.token for o in outs] == [98, 99, 100]
    assert [o.finish for o in outs] == [None, None, FINISH_LENGTH]


def test_eos_and_stop_ids_finish_with_stop_and_are_reported():
    model = succ_model()
    eos_model = type(model)(name="succ", config=model.config.__class__(
        **{**model.config.__dict__, "eos_token_ids": (100,)}), weights=model.weights, tokenizer=None)
    engine = Engine(eos_model)
    a = engine.add_request(GenRequest(prompt=(97,), params=GREEDY, max_tokens=10))
    b = engine.add_request(GenRequest(prompt=(97,), params=GREEDY, max_tokens=10, stop_ids=(99,)))
    c = engine.add_request(GenRequest(prompt=(97,), max_tokens=5,
                                      params=SamplingParams(temperature=0.0, ignore_eos=True)))
    outs = run_to_completion(engine)
    assert tokens_of(outs[a]) == [98, 99, 100] and outs[a][-1].finish == FINISH_STOP
    assert tokens_of(outs[b]) == [98, 99] and outs[b][-1].finish == FINISH_STOP
    assert tokens_of(outs[c]) == [98, 99, 100, 101, 102] and outs[c][-1].finish == FINISH_LENGTH


def test_min_tokens_masks_stop_ids_until_reached(model):
    first = dense_greedy(model, (5, 6, 7), 1)[0]
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=32))
    rid = engine.add_request(GenRequest(prompt=(5, 6, 7), stop_ids=(first,), max_tokens=4,
                                        params=SamplingParams(temperature=0.0, min_tokens=2)))
    got = tokens_of(run_to_completion(engine)[rid])
    assert got[0] != first and len(got) >= 2


def test_context_limit_finishes_with_length():
    engine = Engine(succ_model(), EngineConfig(max_model_len=6))
    rid = engine.add_request(GenRequest(prompt=(10, 11, 12, 13), params=GREEDY, max_tokens=50))
    outs = run_to_completion(engine)[rid]
    assert tokens_of(outs) == [14, 15] and outs[-1].finish == FINISH_LENGTH
    assert engine.max_model_len() == 6
    with pytest.raises(PromptTooLong):
        engine.add_request(GenRequest(prompt=tuple(range(6)), params=GREEDY))
    with pytest.raises(InvalidRequest):
        engine.add_request(GenRequest(prompt=(), params=GREEDY))


def test_no_block_leaks_after_any_mix_of_finish_and_abort(model):
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=40, max_batched_tokens=24,
                                        prefill_chunk=8))
    rng = np.random.default_rng(7)
    live = []
    for step in range(60):
        if step < 40 and step % 2 == 0:
            p = tuple(int(t) for t in rng.integers(0, 64, int(rng.integers(1, 30))))
            live.append(engine.add_request(GenRequest(prompt=p, params=GREEDY,
                                                      max_tokens=int(rng.integers(1, 12)))))
        if step % 5 == 3 and live:
            engine.abort(live.pop(int(rng.integers(0, len(live)))))
        engine.step()
    engine.abort(12345)                                        # unknown id: a no-op
    engine.abort_all()
    stats = engine.stats()
    assert not engine.has_work()
    assert stats.kv_blocks_used == 0 and stats.active_sequences == 0 and stats.queue_depth == 0
    assert stats.kv_blocks_used + stats.kv_blocks_cached + stats.kv_blocks_free == 40


def test_embeddings_are_the_normalised_mean_of_dense_hidden_states_and_leave_running_sequences_alone(model):
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=64))
    prompt = (3, 1, 4, 1, 5)
    rid = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=8))
    produced = engine.step()
    job = engine.add_embedding([[1, 2, 3], [9]])
    finished = []
    while engine.has_work():
        produced += engine.step()
        finished += engine.take_embeddings()
    assert [done.job_id for done in finished] == [job]
    vecs = finished[0].vectors
    for row, ids in zip(vecs, ([1, 2, 3], [9])):
        h = llama.hidden_states(model.config, model.weights, ids).mean(axis=0)
        np.testing.assert_allclose(row, h / np.linalg.norm(h), rtol=1e-5, atol=1e-6)
    assert vecs.shape == (2, model.config.hidden_size)
    assert tokens_of(o for o in produced if o.id == rid) == dense_greedy(model, prompt, 8)


def test_prefix_computed_twice_in_one_step_is_deduplicated(model):
    system = prompts(6, [12])[0]
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=64))
    a = engine.add_request(GenRequest(prompt=system + (1, 2), params=GREEDY, max_tokens=5))
    b = engine.add_request(GenRequest(prompt=system + (3, 4), params=GREEDY, max_tokens=5))
    first = engine.step()                                      # both prefill the same 3 blocks
    assert engine.stats().kv_blocks_used == 3 + 2 * 1          # shared prefix + one private tail each
    outs = run_to_completion(engine)
    for rid, p in ((a, system + (1, 2)), (b, system + (3, 4))):
        got = [o.token for o in first if o.id == rid] + tokens_of(outs[rid])
        assert got == dense_greedy(model, p, 5)


def test_a_request_finished_in_its_prefill_step_still_leaves_its_prompt_cached(model):
    system = prompts(8, [16])[0]
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=64))
    engine.add_request(GenRequest(prompt=system + (1,), params=GREEDY, max_tokens=1))
    run_to_completion(engine)
    assert engine.stats().kv_blocks_cached == 4
    rid = engine.add_request(GenRequest(prompt=system + (2,), params=GREEDY, max_tokens=3))
    outs = run_to_completion(engine)
    assert engine.stats().prefix_hit_tokens == 16
    assert tokens_of(outs[rid]) == dense_greedy(model, system + (2,), 3)


def test_the_context_rule_counts_the_prompt_and_at_least_one_completion_token():
    assert check_context(5, None, 8) == 3                 # None: the room left
    assert check_context(5, 3, 8) == 3                    # exactly at the boundary fits
    with pytest.raises(PromptTooLong) as caught:
        check_context(5, 4, 8)                            # one past the boundary
    assert (caught.value.prompt_tokens, caught.value.completion_tokens,
            caught.value.max_model_len) == (5, 4, 8)
    assert check_context(7, None, 8) == 1
    with pytest.raises(PromptTooLong):
        check_context(8, None, 8)                         # no room for even one token
    assert check_context(7, 0, 8) == 0                    # max_tokens 0 still needs room for one
    with pytest.raises(PromptTooLong):
        check_context(8, 0, 8)
