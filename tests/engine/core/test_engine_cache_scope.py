"""The cache scope (`GenRequest.scope`: LoRA adapter + tenant salt) through the engine.

A request's adapter reaches the forward (its greedy answer equals the numpy-merged model's);
two adapters, two salts, or salted and unsalted requests never share a cached block, a
prefix in flight, or a suffix draft; equal scopes still do. `max_loras` bounds the distinct
adapters one step holds.
"""
from __future__ import annotations

import dataclasses

from engine.api import EngineConfig, GenRequest, SpeculativeConfig
from engine.core.drafts.suffix import SuffixStore
from engine.core.engine import Engine
from engine.core.scheduler import PREFIX_WAIT_MIN_TOKENS
from engine.model.lora import load_adapter
from engine.types import CacheScope
from tests.engine.core.engine_models import (GREEDY, dense_greedy, frozen_clock, random_model,
                                             run_to_completion, tokens_of)
from tests.engine.model.lora_writers import merged_weights, random_pairs, write_adapter

BS = 4
PROMPT = tuple(range(3, 20))          # 17 tokens: 4 whole blocks to cache


def _adapter(tmp_path, model, name: str, seed: int):
    ranks = {f"model.layers.{i}.self_attn.{m}": 4 for i in range(model.config.num_layers)
             for m in ("q_proj", "v_proj")}
    pairs = random_pairs(model, ranks, seed)
    write_adapter(tmp_path / name, pairs, r=4, lora_alpha=8)
    merged = dataclasses.replace(model, weights=merged_weights(model, pairs, {m: 2.0 for m in pairs}))
    return load_adapter(tmp_path / name, model.config, name=name), merged


def _answer(engine, scope: CacheScope, prompt=PROMPT, max_tokens: int = 4) -> tuple[list[int], int]:
    """Run one request alone; (its tokens, the prefix-hit tokens it got)."""
    hits_before = engine.stats().prefix_hit_tokens
    rid = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=max_tokens,
                                        scope=scope))
    outs = run_to_completion(engine)
    return tokens_of(outs[rid]), engine.stats().prefix_hit_tokens - hits_before


def test_each_adapter_answers_as_its_merged_model_and_never_takes_another_scopes_blocks(tmp_path):
    model = random_model()
    a, merged_a = _adapter(tmp_path, model, "a", seed=1)
    b, merged_b = _adapter(tmp_path, model, "b", seed=2)
    engine = Engine(model, EngineConfig(block_size=BS, num_kv_blocks=64))
    expected = {"base": dense_greedy(model, PROMPT, 4), "a": dense_greedy(merged_a, PROMPT, 4),
                "b": dense_greedy(merged_b, PROMPT, 4)}
    assert expected["a"] != expected["base"] and expected["b"] != expected["a"]   # the check can tell
    for name, scope in (("base", CacheScope()), ("a", CacheScope(adapter=a)),
                        ("b", CacheScope(adapter=b))):
        tokens, hits = _answer(engine, scope)
        assert (tokens, hits) == (expected[name], 0), name       # the same prompt, cached by others
    # equal scopes share: the second run of each takes the whole blocks of its prompt
    for name, scope in (("a", CacheScope(adapter=a)), ("base", CacheScope())):
        tokens, hits = _answer(engine, scope)
        assert (tokens, hits) == (expected[name], 16), name


def test_salts_scope_the_cache_and_an_unsalted_request_shares_only_with_unsalted():
    engine = Engine(random_model(), EngineConfig(block_size=BS, num_kv_blocks=64))
    assert _answer(engine, CacheScope(salt="tenant-1"))[1] == 0
    assert _answer(engine, CacheScope(salt="tenant-2"))[1] == 0
    assert _answer(engine, CacheScope())[1] == 0
    assert _answer(engine, CacheScope(salt="tenant-1"))[1] == 16
    assert _answer(engine, CacheScope())[1] == 16


def test_a_scope_whose_blocks_are_all_evicted_leaves_no_tree_behind():
    engine = Engine(random_model(), EngineConfig(block_size=BS, num_kv_blocks=8))
    _answer(engine, CacheScope(salt="gone"))
    radix = engine.blocks.radix
    assert len(radix.roots()) == 2                          # the base's and the salt's
    _answer(engine, CacheScope(), prompt=tuple(range(30, 58)), max_tokens=2)   # needs all 8 blocks
    assert len(radix.roots()) == 1                          # the salt's tree went with its blocks
    assert _answer(engine, CacheScope(salt="gone"))[1] == 0


def test_a_prefix_in_flight_is_waited_for_only_within_its_scope():
    engine = Engine(random_model(), EngineConfig(block_size=BS, num_kv_blocks=256, prefill_chunk=512))
    prefix = tuple(i * 7 % 59 + 1 for i in range(PREFIX_WAIT_MIN_TOKENS + 2 * BS))   # whole blocks
    scopes = (CacheScope(), CacheScope(salt="x"), CacheScope())
    ids = [engine.add_request(GenRequest(prompt=prefix + (60 + i,), params=GREEDY, max_tokens=2,
                                         scope=scope)) for i, scope in enumerate(scopes)]
    engine.step()
    assert [s.id for s in engine.scheduler.running] == ids[:2]     # the salted one did not wait
    run_to_completion(engine)
    stats = engine.stats()
    assert stats.prefix_waits_total == 1                           # the unsalted one waited
    assert stats.prefix_hit_tokens == len(prefix)                  # ... and took the first's blocks


def _suffix_engine(model):
    spec = SpeculativeConfig(method="suffix")
    return Engine(model, EngineConfig(block_size=BS, num_kv_blocks=128, speculative=spec),
                  clock=frozen_clock)


def test_a_drafted_continuation_never_crosses_a_scope(tmp_path):
    model = random_model()
    a, _ = _adapter(tmp_path, model, "a", seed=1)
    prompt, answer_tokens = (5, 9, 11, 2, 7), 24
    for other in (CacheScope(salt="t2"), CacheScope(), CacheScope(adapter=a)):
        engine = _suffix_engine(model)
        _answer(engine, CacheScope(salt="t1"), prompt, answer_tokens)     # its text joins the store
        drafted = engine.stats().spec_draft_tokens
        _answer(engine, other, prompt, answer_tokens)
        assert engine.stats().spec_draft_tokens == drafted, other
        _answer(engine, CacheScope(salt="t1"), prompt, answer_tokens)     # its own scope drafts
        assert engine.stats().spec_draft_tokens > drafted, other


def test_the_suffix_store_proposes_only_from_documents_of_the_same_scope():
    store = SuffixStore(capacity_tokens=64)
    store.add([1, 2, 3, 4, 5, 6], CacheScope(salt="a"))
    assert store.propose([1, 2, 3], 3, CacheScope(salt="a")) == [4, 5, 6]
    assert store.propose([1, 2, 3], 3, CacheScope(salt="b")) == []
    assert store.propose([1, 2, 3], 3, CacheScope()) == []
    store.add([1, 2, 3, 9], CacheScope())
    assert store.propose([1, 2, 3], 3, CacheScope()) == [9]
    assert store.propose([1, 2, 3], 3, CacheScope(salt="a")) == [4, 5, 6]


def test_max_loras_defers_a_sequence_whose_adapter_would_exceed_it(tmp_path):
    model = random_model()
    a, merged_a = _adapter(tmp_path, model, "a", seed=1)
    b, merged_b = _adapter(tmp_path, model, "b", seed=2)
    engine = Engine(model, EngineConfig(block_size=BS, num_kv_blocks=64, max_loras=1))
    ids = {engine.add_request(GenRequest(prompt=PROMPT, params=GREEDY, max_tokens=3,
                                         scope=CacheScope(adapter=adapter))): adapter
           for adapter in (a, b, None, a)}
    adapters_per_step, outs = [], {}
    stats = engine.stats()
    assert (stats.max_loras, stats.running_adapters, stats.waiting_adapters) == (1, (), ("a", "b"))
    while engine.has_work():
        plan_adapters = set()
        original = engine.scheduler.schedule

        def schedule():
            plan = original()
            plan_adapters.update(item.seq.req.scope.adapter for item in plan.scheduled)
            return plan
        engine.scheduler.schedule = schedule
        for out in engine.step():
            outs.setdefault(out.id, []).append(out)
        engine.scheduler.schedule = original
        adapters_per_step.append(plan_adapters - {None})
        if len(adapters_per_step) == 1:                       # a runs, b waits for it
            stats = engine.stats()
            assert (stats.running_adapters, stats.waiting_adapters) == (("a",), ("b",))
    assert max(len(s) for s in adapters_per_step) == 1
    assert {b} in adapters_per_step                           # b ran once a's sequences ended
    expected = {a: dense_greedy(merged_a, PROMPT, 3), b: dense_greedy(merged_b, PROMPT, 3),
                None: dense_greedy(model, PROMPT, 3)}
    assert {rid: tokens_of(o) for rid, o in outs.items()} == {rid: expected[ad] for rid, ad in ids.items()}


def test_an_adapter_s_scale_multiplies_its_products(tmp_path):
    model = random_model()
    ranks = {f"model.layers.{i}.self_attn.v_proj": 4 for i in range(model.config.num_layers)}
    pairs = random_pairs(model, ranks, seed=3, gain=1.5)
    write_adapter(tmp_path / "s", pairs, r=4, lora_alpha=8, target_modules=["v_proj"])   # scaling 2
    halved = load_adapter(tmp_path / "s", model.config, scale=0.5)
    merged = dataclasses.replace(model, weights=merged_weights(model, pairs, {m: 1.0 for m in pairs}))
    full = dataclasses.replace(model, weights=merged_weights(model, pairs, {m: 2.0 for m in pairs}))
    assert dense_greedy(merged, PROMPT, 6) != dense_greedy(full, PROMPT, 6)   # the check can tell
    engine = Engine(model, EngineConfig(block_size=BS, num_kv_blocks=64))
    assert _answer(engine, CacheScope(adapter=halved), max_tokens=6)[0] == dense_greedy(merged, PROMPT, 6)
