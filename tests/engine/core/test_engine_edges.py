"""Edges of the engine's rules that one wrong comparison would break silently: `min_tokens`
counted exactly, a queue deadline that never touches a preempted (already running) request,
a prompt that is wholly cached in full blocks (at least one prompt token is computed), and
a cached chain of blocks that counts whole as room (not only its one evictable leaf)."""
from engine.api import FINISH_DEADLINE, EngineConfig, GenRequest, SamplingParams
from engine.core.engine import Engine
from tests.engine.core.engine_models import (GREEDY, dense_greedy, random_model, run_to_completion,
                                        succ_model, tokens_of)

EOS_ID = 100                         # the succ model's EOS here: 97 -> 98 -> 99 -> 100


def eos_succ_model():
    model = succ_model()
    config = model.config.__class__(**{**model.config.__dict__, "eos_token_ids": (EOS_ID,)})
    return type(model)(name="succ", config=config, weights=model.weights, tokenizer=None)


def test_min_tokens_masks_eos_until_exactly_that_many_tokens_exist():
    engine = Engine(eos_succ_model())
    free = engine.add_request(GenRequest(prompt=(97,), params=GREEDY, max_tokens=10))
    held = engine.add_request(GenRequest(prompt=(97,), max_tokens=10,
                                         params=SamplingParams(temperature=0.0, min_tokens=3)))
    outs = run_to_completion(engine)
    assert tokens_of(outs[free]) == [98, 99, EOS_ID]        # EOS is the third sample
    got = tokens_of(outs[held])
    assert got[:2] == [98, 99] and got[2] != EOS_ID         # masked: only 2 tokens existed
    assert len(got) >= 4


def test_a_preempted_running_request_is_not_expired_by_the_queue_deadline():
    model = random_model()
    now = [0.0]
    a_prompt, b_prompt = (3, 1, 4, 1, 5, 9), (2, 7, 1, 8, 2, 8)
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=4, prefix_cache="none"),
                    clock=lambda: now[0])
    a = engine.add_request(GenRequest(prompt=a_prompt, params=GREEDY, max_tokens=8,
                                      deadline_s=1.0))
    b = engine.add_request(GenRequest(prompt=b_prompt, params=GREEDY, max_tokens=8,
                                      deadline_s=1.0))
    first_step = engine.step()                      # both scheduled before their deadline
    now[0] = 5.0                                    # every deadline has long passed
    outs = run_to_completion(engine)
    for out in first_step:
        outs[out.id].insert(0, out)
    assert engine.stats().preemptions_total >= 1    # one of them went back to the queue
    assert all(o.finish != FINISH_DEADLINE for rid in (a, b) for o in outs[rid])
    assert tokens_of(outs[a]) == dense_greedy(model, a_prompt, 8)
    assert tokens_of(outs[b]) == dense_greedy(model, b_prompt, 8)


def test_a_prompt_of_exactly_n_cached_full_blocks_still_computes_its_last_token():
    model = random_model()
    prompt = tuple(range(3, 15))                    # 12 tokens = 3 full blocks of 4
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=64, prefix_cache="radix"))
    first = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=3))
    assert tokens_of(run_to_completion(engine)[first]) == dense_greedy(model, prompt, 3)
    again = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=3))
    assert tokens_of(run_to_completion(engine)[again]) == dense_greedy(model, prompt, 3)
    # 2 blocks shared, the third's first 3 rows copied: only the last token is computed
    assert engine.stats().prefix_hit_tokens == len(prompt) - 1
    assert engine.stats().kv_blocks_used == 0



def test_kv_size_names_the_pools_the_engine_built():
    model = random_model()
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=6))
    size = engine.kv_size()
    mc = model.config
    # K and V pools per layer, each [blocks, block_size, kv_heads, head_dim] of float32
    pool_bytes = 6 * 4 * mc.num_kv_heads * mc.head_dim * 4
    assert (size.num_blocks, size.block_size_tokens, size.capacity_tokens) == (6, 4, 24)
    assert size.nbytes == 2 * mc.num_layers * pool_bytes


def test_a_prompt_needing_more_blocks_than_the_cached_leaves_evicts_a_whole_chain():
    """The first prompt leaves a chain of 10 cached blocks (one leaf) and 2 free ones; the
    second needs 8 blocks for its first piece. Counting only the leaf as available, it
    waited forever with nothing running (the engine never finished)."""
    model = random_model()
    engine = Engine(model, EngineConfig(block_size=2, num_kv_blocks=12, prefill_chunk=16))
    first, second = tuple(range(1, 21)), tuple(range(30, 46))
    engine.add_request(GenRequest(prompt=first, params=GREEDY, max_tokens=1))
    run_to_completion(engine)
    assert engine.stats().kv_blocks_cached == 10 and engine.blocks.radix.num_evictable == 1
    b = engine.add_request(GenRequest(prompt=second, params=GREEDY, max_tokens=3))
    outs = run_to_completion(engine, max_steps=50)
    assert tokens_of(outs[b]) == dense_greedy(model, second, 3)
    assert engine.stats().evictions_total >= 6
