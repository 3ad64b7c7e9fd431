"""Sliding-window layers (Gemma 3's options) on a tiny random model: dense and paged agree.

A random 3-layer model gets Gemma's options (window of WINDOW tokens on layers 0 and 1,
their own RoPE base, post-norms, embeddings x sqrt(d), GeGLU). Prompts are several windows
long, so a layer that attended past its window would change the logits: the first test
checks that the window does change them, the others that the paged engine (small blocks,
chunked prefill, batched decode rows through the mirror, a cached prefix) computes the same
tokens and logits as the dense reference.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from engine.api import EngineConfig, GenRequest
from engine.core.engine import Engine
from engine.errors import PromptTooLong
from engine.model import llama
from engine.model.spec import FamilyOptions, Model
from tests.engine.core.engine_models import (GREEDY, dense_embeddings, dense_greedy, random_model,
                                             run_embeddings, run_to_completion, tokens_of)

WINDOW = 6
D_MODEL = 32
GEMMA_LIKE = FamilyOptions(family="gemma3", post_norms=True, embed_scale=math.sqrt(D_MODEL),
                           mlp_activation="gelu_tanh", sliding_window=WINDOW,
                           sliding_layers=(True, True, False), local_rope_theta=100.0)
# Blocks smaller than the window and prefill chunks that do not divide the prompt: a window
# edge falls inside blocks and inside chunks.
PAGED = EngineConfig(block_size=4, num_kv_blocks=256, prefill_chunk=5)
PROMPTS = [[(7 * i + 3 * j) % 61 + 1 for i in range(length)]
           for j, length in enumerate((23, 31, 9))]
NEW_TOKENS = 12


def _gemma_like(options: FamilyOptions = GEMMA_LIKE) -> Model:
    base = random_model(vocab=64, d=D_MODEL, layers=3, seed=5)
    rng = np.random.default_rng(6)
    layers = tuple(dataclasses.replace(
        layer, post_attn_norm=(1 + 0.2 * rng.standard_normal(D_MODEL)).astype(np.float32),
        post_mlp_norm=(1 + 0.2 * rng.standard_normal(D_MODEL)).astype(np.float32))
        for layer in base.weights.layers)
    weights = dataclasses.replace(base.weights, layers=layers,
                                  embed=base.weights.embed / np.float32(math.sqrt(D_MODEL)))
    config = dataclasses.replace(base.config, options=options)
    return Model(name="gemma-like", config=config, weights=weights, tokenizer=None)


def engine_tokens(engine: Engine, prompts) -> list[list[int]]:
    """The greedy answers of `prompts`, run together on `engine` until it is idle."""
    ids = [engine.add_request(GenRequest(prompt=tuple(p), params=GREEDY, max_tokens=NEW_TOKENS))
           for p in prompts]
    outs = run_to_completion(engine)
    return [tokens_of(outs[rid]) for rid in ids]


def test_the_window_changes_the_logits_of_long_prompts():
    """Without this the other tests could not tell a windowed engine from a plain one."""
    model = _gemma_like()
    wide = dataclasses.replace(GEMMA_LIKE, sliding_window=10 ** 6)   # same layers, no edge
    unwindowed = dataclasses.replace(model.config, options=wide)
    prompt = PROMPTS[1]
    windowed_logits = llama.forward(model.config, model.weights, prompt)           # [n, V]
    plain_logits = llama.forward(unwindowed, model.weights, prompt)                # [n, V]
    # the first WINDOW positions see no more than the window either way
    np.testing.assert_allclose(windowed_logits[:WINDOW], plain_logits[:WINDOW], atol=1e-5)
    assert np.abs(windowed_logits[WINDOW:] - plain_logits[WINDOW:]).max() > 0.1


def test_windowed_attention_equals_a_masked_softmax_by_hand():
    rng = np.random.default_rng(1)
    n, heads, kv, hd = 11, 2, 1, 4
    q = rng.standard_normal((n, heads, hd)).astype(np.float32)
    k = rng.standard_normal((n, kv, hd)).astype(np.float32)
    v = rng.standard_normal((n, kv, hd)).astype(np.float32)
    pos = np.arange(n)
    got = llama.attention(q, k, v, pos, pos, window=3, scale=0.5).reshape(n, heads, hd)
    for i in range(n):
        seen = [j for j in range(n) if i - 3 < j <= i]                             # HF's mask
        for h in range(heads):
            scores = np.array([0.5 * q[i, h] @ k[j, 0] for j in seen])
            p = np.exp(scores - scores.max())
            want = (p / p.sum()) @ v[seen, 0]
            np.testing.assert_allclose(got[i, h], want, rtol=1e-5, atol=1e-6)


def test_paged_engine_matches_dense_with_sliding_windows():
    """All prompts at once (chunked prefill, then batched decode rows), twice: the second
    round starts from the first round's blocks in the prefix cache."""
    model = _gemma_like()
    want = [dense_greedy(model, p, NEW_TOKENS) for p in PROMPTS]
    engine = Engine(model, PAGED)
    for _ in range(2):
        assert engine_tokens(engine, PROMPTS) == want
    assert engine.stats().prefix_hit_tokens >= PAGED.block_size * 10


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_runner_logits_match_dense_logits_with_sliding_windows(chunk):
    """Logits, not only tokens: every prompt position through the runner in chunks of
    `chunk` tokens over 4-token blocks equals the dense forward's row."""
    from engine.core.chunk import Chunk
    from engine.core.runner import ModelRunner
    from engine.kv.pools import KVCache
    model = _gemma_like()
    prompt = PROMPTS[1]
    want = llama.forward(model.config, model.weights, prompt)                      # [n, V]
    kv = KVCache(model.config, 16, 4)
    runner = ModelRunner(model.config, model.weights, kv, 64, mirror_bytes=kv.nbytes)
    table = tuple(range(16))
    got = []
    for start in range(0, len(prompt), chunk):
        tokens = tuple(prompt[start:start + chunk])
        step = Chunk(tokens, start, table, num_logits=len(tokens), seq_id=0)
        got.append(runner.forward([step]))                                         # [n_c, V]
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-4, atol=1e-4)


def test_members_sharing_a_cached_prefix_keep_their_own_windows():
    """Two prompts with a common cached prefix longer than the window, run together: their
    shared leading blocks must not be attended as a whole by the sliding layers."""
    model = _gemma_like()
    prefix = PROMPTS[1][:24]                                      # 6 whole 4-token blocks
    prompts = [prefix + [5, 9, 11, 3], prefix + [40, 2, 17, 33]]   # one group of 4 queries
    want = [dense_greedy(model, p, NEW_TOKENS) for p in prompts]
    engine = Engine(model, PAGED)
    first = engine.add_request(GenRequest(prompt=tuple(prefix), params=GREEDY, max_tokens=1))
    run_to_completion(engine)                                     # the prefix is now cached
    assert first is not None and engine_tokens(engine, prompts) == want
    assert engine.stats().prefix_hit_tokens >= 2 * 20


def test_speculative_verification_keeps_the_windows():
    """Verification chunks (the last token + drafts) are multi-query rows past the window."""
    from engine.api import SpeculativeConfig
    model = _gemma_like()
    prompt = [1, 2] * 12                # the output repeats 2-grams of itself: drafts to verify
    want = dense_greedy(model, prompt, 40)
    engine = Engine(model, dataclasses.replace(
        PAGED, speculative=SpeculativeConfig(num_speculative_tokens=4)))
    rid = engine.add_request(GenRequest(prompt=tuple(prompt), params=GREEDY, max_tokens=40))
    assert tokens_of(run_to_completion(engine)[rid]) == want
    assert engine.stats().spec_draft_tokens > 0


def test_sliding_layers_gather_only_the_blocks_their_windows_reach():
    """A 5-query chunk at position 40 (4-token blocks, window 6): its earliest key is 35,
    in block 8, so the sliding layers read blocks 8..11 where the global ones read 0..11."""
    from engine.core.attention_plan import AttentionPlanner, Member
    planner = AttentionPlanner(num_heads=2, group_size=2, block_size=4, window_tokens=WINDOW)
    table = tuple(range(100, 116))
    group = planner.gather_group(5, [Member(first_row=0, start_pos=40, block_table=table, seq_id=0)])
    assert group.block_index.tolist() == [list(table[:12])]
    assert group.window.block_index.tolist() == [list(table[8:12])]
    assert group.window.first_pos.tolist() == [32]
    visible = np.isfinite(group.window.bias[0, 0]).reshape(2, 5, 16)[0]     # [query, key]
    for i in range(5):                                   # query 40 + i sees keys 35 + i .. 40 + i
        assert np.flatnonzero(visible[i]).tolist() == list(range(3 + i, 9 + i))


@pytest.mark.parametrize("prompts", [[PROMPTS[1]], PROMPTS], ids=["one row", "rows far apart"])
def test_decode_rows_read_only_their_windows_in_sliding_layers(monkeypatch, prompts):
    """Decoding past the window, every sliding layer's mirror slice holds at most its
    window's keys (one row, or rows whose windows lie far apart: one by one), the global
    layer all of them; and the tokens are still the dense reference's."""
    from engine.core import runner
    keys_read = []
    plain = runner._mirror_softmax_ctx

    def recording(q, keys, values, bias, out):
        keys_read.append(keys.shape[2])                  # [r, KV, L, hd]: L positions
        plain(q, keys, values, bias, out)
    monkeypatch.setattr(runner, "_mirror_softmax_ctx", recording)
    model = _gemma_like()
    want = [dense_greedy(model, p, NEW_TOKENS) for p in prompts]
    engine = Engine(model, PAGED)
    assert engine_tokens(engine, prompts) == want
    windowed = [n for n in keys_read if n <= WINDOW]
    longest = max(len(p) for p in prompts)
    assert windowed and max(keys_read) >= longest       # the global layer reads the context
    # two sliding layers of three: per decode step, 2 windowed reads (per row when apart)
    # for each global one that reads past the window
    assert len(windowed) >= 2 * len([n for n in keys_read if n > WINDOW])


def test_a_shared_cached_prefix_is_split_off_for_the_global_layers_only():
    """Two members over the same 6 leading blocks: the global layers meet them once (the
    shared-prefix shortcut), each member's sliding layers read only their own window."""
    from engine.core.attention_plan import AttentionPlanner, Member
    planner = AttentionPlanner(num_heads=2, group_size=2, block_size=4, window_tokens=WINDOW)
    shared = tuple(range(6))
    members = [Member(0, 24, shared + (10, 11), 0), Member(4, 24, shared + (20, 21), 1)]
    group = planner.gather_group(4, members)
    assert group.shared_blocks.tolist() == list(shared)
    assert group.block_index.tolist() == [[10], [20]]
    # queries 24..27 reach back to key 19: blocks 4, 5 and the member's own
    assert group.window.block_index.tolist() == [[4, 5, 10], [4, 5, 20]]


def test_below_the_window_the_sliding_layers_share_the_cached_prefix_too():
    """No query past the window: the sliding layers read the global layers' keys, shared
    blocks included, and the engine still computes the dense reference's tokens."""
    from engine.core.attention_plan import AttentionPlanner, Member
    planner = AttentionPlanner(num_heads=2, group_size=2, block_size=4, window_tokens=16)
    members = [Member(0, 8, (0, 1, 10), 0), Member(4, 8, (0, 1, 20), 1)]
    group = planner.gather_group(4, members)                      # queries 8..11 < 16
    assert group.window is None and group.shared_blocks.tolist() == [0, 1]
    model = _gemma_like(dataclasses.replace(GEMMA_LIKE, sliding_window=16))
    prefix = PROMPTS[0][:8]
    prompts = [prefix + [5, 9, 11], prefix + [40, 2, 17]]
    want = [dense_greedy(model, p, NEW_TOKENS) for p in prompts]      # runs past 16 tokens
    engine = Engine(model, PAGED)
    engine.add_request(GenRequest(prompt=tuple(prefix), params=GREEDY, max_tokens=1))
    run_to_completion(engine)                                     # the prefix is now cached
    assert engine_tokens(engine, prompts) == want
    assert engine.stats().prefix_hit_tokens >= 2 * 8


@pytest.mark.parametrize("query_block", [1, 2, 3])
def test_query_blocks_of_a_sliding_layer_see_their_whole_windows(monkeypatch, query_block):
    """Chunks cut into query blocks smaller than the chunk (a real model's are 256 rows):
    logits of a whole prompt in one chunk, and tokens of prompts prefilled side by side
    at different positions, still equal the dense reference's."""
    from engine.core import runner as runner_module
    from engine.core.chunk import Chunk
    from engine.core.runner import ModelRunner
    from engine.kv.pools import KVCache
    monkeypatch.setattr(runner_module, "WINDOW_QUERY_BLOCK", query_block)
    model = _gemma_like()
    prompt = PROMPTS[1]
    kv = KVCache(model.config, 16, 4)
    runner = ModelRunner(model.config, model.weights, kv, 64, mirror_bytes=kv.nbytes)
    got = runner.forward([Chunk(tuple(prompt), 0, tuple(range(16)), num_logits=len(prompt), seq_id=0)])
    np.testing.assert_allclose(got, llama.forward(model.config, model.weights, prompt),
                               rtol=1e-4, atol=1e-4)
    want = [dense_greedy(model, p, NEW_TOKENS) for p in PROMPTS]
    engine = Engine(model, PAGED)
    assert engine_tokens(engine, PROMPTS) == want


# ----------------------------------------------------------------- the window pool

# One sequence at a time and small steps: the window pool holds 1 * (2 + 2) + 2 = 6 blocks
# (engine/kv/window.py), 24 positions, while the answers below need up to 72. The global
# pool is large enough that the decode mirror (sized by the pools' bytes) holds the row.
ONE_AT_A_TIME = EngineConfig(block_size=4, num_kv_blocks=512, prefill_chunk=5, max_num_seqs=1,
                             max_batched_tokens=8)
LONG_PROMPTS = [[(5 * i + 3) % 61 + 1 for i in range(length)] for length in (23, 60)]


def test_a_long_chat_holds_window_blocks_by_the_window_not_the_context():
    """Answers far longer than the window pool equal the dense reference, without
    preemption, and the sliding layers' blocks held at once stay one window's worth for a
    prompt of 23 and of 60 tokens alike: kept past the window, they would not fit."""
    from engine.kv.pools import blocks_for_tokens
    model = _gemma_like()
    for prompt in LONG_PROMPTS:
        engine = Engine(model, ONE_AT_A_TIME)
        window = engine.blocks.window
        assert window.num_blocks == 6 < blocks_for_tokens(len(prompt) + NEW_TOKENS, 4)
        assert engine_tokens(engine, [prompt]) == [dense_greedy(model, prompt, NEW_TOKENS)]
        assert engine.stats().preemptions_total == 0
        assert window.num_held_peak <= blocks_for_tokens(WINDOW, 4) + 2
        assert window.num_held_blocks == 0                      # all released at the end
        assert engine.runner.mirror.layers_grown_total > 0      # decode rows read the mirror


def test_the_sliding_layers_arrays_hold_only_the_window_pool():
    model = _gemma_like()
    engine = Engine(model, ONE_AT_A_TIME)
    sizes = [k.shape[0] for k in engine.kv.k]                  # blocks per layer
    assert sizes == [6, 6, 512]                                 # layers 0 and 1 slide


@pytest.mark.parametrize("shared, hit", [(36, 36), (38, 38), (32, 0)])
def test_a_cached_prefix_past_the_window_pool_is_reused_as_far_as_its_windows_are_kept(shared, hit):
    """After a 40-token prompt and its answer, the tree keeps only the last few window
    blocks (the pool holds 6): a prompt sharing 36 tokens finds the window of position 36
    cached and starts there (38: the last two rows copied from a cached block, in the window
    pool too); one sharing 32 needs blocks 6 and 7, gone, and so does every
    shorter match: it starts from nothing. Both answers equal the dense reference."""
    model = _gemma_like()
    first = LONG_PROMPTS[1][:40]
    second = first[:shared] + [9, 4, 33]
    engine = Engine(model, ONE_AT_A_TIME)
    assert engine_tokens(engine, [first]) == [dense_greedy(model, first, NEW_TOKENS)]
    assert engine_tokens(engine, [second]) == [dense_greedy(model, second, NEW_TOKENS)]
    assert engine.stats().prefix_hit_tokens == hit
    assert engine.blocks.window.evictions_total > 0


def test_embeddings_write_and_read_the_sliding_layers_by_their_window_table():
    """After a chat has moved the window pool's free list apart from the global one, an
    embedding input's sliding layers must still go through its own window blocks."""
    model = _gemma_like()
    engine = Engine(model, ONE_AT_A_TIME)
    engine_tokens(engine, [LONG_PROMPTS[0]])
    inputs = [LONG_PROMPTS[1][:20], LONG_PROMPTS[1][30:45]]
    with pytest.raises(PromptTooLong):                          # 7 window blocks: more than the pool
        engine.add_embedding([LONG_PROMPTS[1][:28]])
    np.testing.assert_allclose(run_embeddings(engine, inputs), dense_embeddings(model, inputs),
                               atol=1e-5)
    assert engine.blocks.window.num_held_blocks == 0


def test_preemption_releases_both_tables_and_the_answers_stay_exact():
    """Two 23-token prompts and their answers need 9 blocks each of a 10-block global pool:
    one is preempted and recomputed, while the window tables have drifted apart from the
    block tables; the answers equal the dense reference and nothing stays held."""
    model = _gemma_like()
    config = dataclasses.replace(ONE_AT_A_TIME, num_kv_blocks=10, max_num_seqs=2, prefix_cache="none")
    engine = Engine(model, config)
    prompts = [LONG_PROMPTS[0], [(t + 11) % 61 + 1 for t in LONG_PROMPTS[0]]]
    assert engine_tokens(engine, prompts) == [dense_greedy(model, p, NEW_TOKENS) for p in prompts]
    assert engine.stats().preemptions_total > 0
    assert engine.blocks.window.num_free_blocks == engine.blocks.window.num_blocks


def test_the_budget_a_window_pool_saves_goes_to_more_global_blocks():
    from engine.kv.pools import BYTES_PER_MIB, num_blocks_for_budget
    from engine.kv.window import pool_sizes
    model = _gemma_like()
    config = EngineConfig(block_size=4, kv_cache_mib=1, max_num_seqs=2, max_batched_tokens=16)
    every_layer = num_blocks_for_budget(model.config, 4, 1)
    num_blocks, num_window_blocks = pool_sizes(model.config, config)
    assert num_window_blocks == 2 * (2 + 2) + 4
    assert num_blocks > 2 * every_layer
    engine = Engine(model, config)
    assert engine.kv.nbytes <= BYTES_PER_MIB and engine.kv.num_blocks == num_blocks


def test_a_model_without_sliding_layers_has_no_window_pool():
    from engine.kv.pools import num_blocks_for_budget
    model = random_model(vocab=64, d=D_MODEL, layers=3, seed=5)
    engine = Engine(model, EngineConfig(block_size=4, kv_cache_mib=1))
    assert engine.blocks.window is None and not any(engine.kv.in_window_pool)
    assert engine.kv.num_blocks == num_blocks_for_budget(model.config, 4, 1)
    assert {k.shape[0] for k in engine.kv.k} == {engine.kv.num_blocks}
