"""The throughput fast paths: allocator tuning, batched greedy, shared-prefix attention,
in-order decode-mirror rows. Each must give exactly what the general path gives."""
import sys

import numpy as np
import pytest

from engine import memory
from engine.core import sampler
from engine.core import engine as engine_mod
from engine.api import EngineConfig, GenRequest, SamplingParams
from engine.kv.pools import KVCache
from engine.core.attention_plan import Member, MirrorGroup
from engine.core.chunk import Chunk
from engine.core.runner import ModelRunner
from tests.engine.core.engine_models import GREEDY, logits_of, dense_greedy, random_model, run_to_completion, tokens_of

BS = 4


# --------------------------------------------------------------------------- memory.tune_malloc

def test_tune_malloc_succeeds_exactly_on_glibc(monkeypatch):
    monkeypatch.setattr(memory, "_result", None)
    assert memory.tune_malloc() is memory.is_glibc()


def test_tune_malloc_applies_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "_result", None)
    monkeypatch.setattr(memory, "_apply", lambda: calls.append(1) or True)
    assert memory.tune_malloc() and memory.tune_malloc()
    assert calls == [1]


def test_tune_malloc_leaves_other_platforms_alone(monkeypatch):
    def refuse(*args):
        raise AssertionError("libc must not be loaded off glibc")
    monkeypatch.setattr(memory, "_result", None)
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(memory.ctypes, "CDLL", refuse)
    assert memory.tune_malloc() is False


def test_engine_construction_leaves_the_process_allocator_alone(monkeypatch):
    """Process-wide tuning is the start-up's explicit step (server/serve.py), not a side
    effect of building an Engine."""
    calls = []
    monkeypatch.setattr(memory, "_apply", lambda: calls.append(1) or True)
    monkeypatch.setattr(memory, "_result", None)
    engine_mod.Engine(random_model(), EngineConfig(num_kv_blocks=8, block_size=BS))
    assert calls == []


# --------------------------------------------------------------------------- batched greedy

@pytest.mark.parametrize("params,suppress", [
    (SamplingParams(temperature=0.5), ()),
    (SamplingParams(temperature=0.0, logit_bias=((3, 1.0),)), ()),
    (SamplingParams(temperature=0.0, repetition_penalty=1.2), ()),
    (SamplingParams(temperature=0.0, presence_penalty=0.5), ()),
    (SamplingParams(temperature=0.0, frequency_penalty=0.5), ()),
    (SamplingParams(temperature=0.0, logprobs=True), ()),
    (SamplingParams(temperature=0.0, top_logprobs=2), ()),
    (SamplingParams(temperature=0.0), (7,)),
])
def test_any_processor_or_report_leaves_the_greedy_fast_path(params, suppress):
    assert not sampler.is_plain_greedy(params, suppress)


def test_batched_argmax_equals_the_full_sampler_including_ties():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((6, 50)).astype(np.float32)              # [R, V]
    logits[2, [4, 9, 30]] = logits[2].max() + 1.0                         # a three-way tie
    logits[5, :] = 0.0                                                    # all equal
    assert sampler.is_plain_greedy(GREEDY)
    fast = sampler.greedy_tokens(logits)
    for row, token in zip(logits, fast):
        full = sampler.sample(row, GREEDY, seed=0, sample_index=0, output_counts={})
        assert sampler.greedy_result(token) == full


def test_engine_mixes_greedy_rows_with_processed_ones():
    model = random_model(seed=8)
    prompt = (5, 9, 11, 2)
    engine = engine_mod.Engine(model, EngineConfig(num_kv_blocks=32, block_size=BS))
    plain = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=6))
    banned = dense_greedy(model, prompt, 1)[0]
    biased = engine.add_request(GenRequest(prompt=prompt, max_tokens=6, params=SamplingParams(
        temperature=0.0, logit_bias=((banned, -100.0),), logprobs=True)))
    outs = run_to_completion(engine)
    assert tokens_of(outs[plain]) == dense_greedy(model, prompt, 6)
    assert tokens_of(outs[biased])[0] != banned and outs[biased][0].logprob < 0.0


# --------------------------------------------------------------------------- runner fast paths

def count_handoffs(run: ModelRunner) -> list:
    """A list that grows by one each time `run` hands work to its helper thread."""
    calls: list = []
    submit = run.helper.submit
    run.helper.submit = lambda *a: calls.append(1) or submit(*a)
    return calls


@pytest.mark.parametrize("split", [False, True], ids=["one-thread", "exp-split-over-two"])
def test_shared_prefix_blocks_are_attended_once_and_match_dense(split):
    model = random_model(seed=11)
    rng = np.random.default_rng(5)
    prefix = list(map(int, rng.integers(0, 64, 2 * BS)))                  # two full blocks
    seqs = [prefix + list(map(int, rng.integers(0, 64, 3))) for _ in range(3)]
    tables = [(0, 1, 2), (0, 1, 3), (0, 1, 4)]                            # blocks 0, 1 shared
    run = ModelRunner(model.config, model.weights, KVCache(model.config, 8, BS), 64)
    run.forward([Chunk(tuple(prefix), 0, (0, 1), 0)])
    if split:                                                             # the helper thread's path
        run.parallel_min_elements = 0
        calls = count_handoffs(run)
    chunks = [Chunk(tuple(s[2 * BS:]), 2 * BS, t, 3) for s, t in zip(seqs, tables)]
    (group,) = run.planner.plan(chunks)
    assert list(group.shared_blocks) == [0, 1] and group.block_index.tolist() == [[2], [3], [4]]
    got = run.forward(chunks)                                             # [9, V]
    want = np.concatenate([logits_of(model, s)[2 * BS:] for s in seqs])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert not split or len(calls) == model.config.num_layers             # one hand-off a layer


def test_blocks_a_query_cannot_wholly_see_are_not_shared():
    model = random_model(seed=12)
    run = ModelRunner(model.config, model.weights, KVCache(model.config, 8, BS), 64)
    members = [Member(0, 2 * BS, (0, 1, 2), 0), Member(3, BS + 1, (0, 1, 3), 1)]  # second starts inside block 1
    assert run.planner.num_shared_blocks(members) == 1
    assert run.planner.num_shared_blocks(members[:1]) == 0                      # alone: nothing to share


def test_decode_rows_in_mirror_order_skip_the_scatter_and_match_dense():
    model = random_model(seed=13)
    rng = np.random.default_rng(6)
    toks = [list(map(int, rng.integers(0, 64, 9))) for _ in range(2)]
    tables = [(0, 1, 2), (3, 4, 5)]
    run = ModelRunner(model.config, model.weights, KVCache(model.config, 8, BS), 64, mirror_bytes=1 << 22)
    run.forward([Chunk(tuple(t[:7]), 0, tb, 0, i) for i, (t, tb) in enumerate(zip(toks, tables))])
    chunks = [Chunk((t[7],), 7, tb, 1, i) for i, (t, tb) in enumerate(zip(toks, tables))]
    (group,) = run.planner.plan(chunks)
    assert isinstance(group, MirrorGroup) and group.in_order
    got = run.forward(chunks)
    np.testing.assert_allclose(got, np.stack([logits_of(model, t)[7] for t in toks]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("in_order", [True, False], ids=["rows-in-order", "scattered-rows"])
def test_mirror_attention_split_over_two_threads_matches_dense(in_order):
    """Decode rows of unequal lengths (a bias) over the mirror, cut in halves for the helper."""
    model = random_model(seed=14)
    rng = np.random.default_rng(7)
    lengths = [9, 6, 11, 8, 10]
    toks = [list(map(int, rng.integers(0, 64, n))) for n in lengths]
    tables = [tuple(range(3 * i, 3 * i + 3)) for i in range(len(toks))]
    run = ModelRunner(model.config, model.weights, KVCache(model.config, 16, BS), 64, mirror_bytes=1 << 22)
    run.mirror_parallel_min_elements = 0
    calls = count_handoffs(run)
    run.forward([Chunk(tuple(t[:-2]), 0, tb, 0, i) for i, (t, tb) in enumerate(zip(toks, tables))])
    run.forward([Chunk((t[-2],), len(t) - 2, tb, 1, i)                     # mirror rows 0..4
                 for i, (t, tb) in enumerate(zip(toks, tables))])
    members = list(range(len(toks))) if in_order else [4, 1, 3]     # a subset: rows not in order
    chunks = [Chunk((toks[i][-1],), len(toks[i]) - 1, tables[i], 1, i) for i in members]
    calls.clear()
    (group,) = run.planner.plan(chunks)
    assert isinstance(group, MirrorGroup) and group.in_order == in_order and group.bias is not None
    got = run.forward(chunks)
    want = np.stack([logits_of(model, toks[i])[-1] for i in members])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(calls) == model.config.num_layers                          # one hand-off a layer
