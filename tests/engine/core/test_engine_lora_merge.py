"""Merged weights for steps on one adapter alone, through the engine and its stats.

A step whose rows all run on one adapter runs on that adapter's merged weights; a step
that also holds base rows or another adapter runs grouped (the base's weights and each
adapter's products); the engine holds one merged adapter at a time, switches when another
runs alone, and frees it when told the adapter was unloaded; speculative verification rows
on one adapter are merged steps too. Everything is observed through
`Engine.stats()` (what /metrics publishes), and every answer is checked against the dense
forward of an independent numpy merge (tests/engine/model/lora_writers.py).
"""
from __future__ import annotations

import dataclasses
import weakref

from engine.api import EngineConfig, GenRequest, SpeculativeConfig
from engine.core.engine import Engine
from engine.model.lora import load_adapter
from engine.types import CacheScope
from tests.engine.core.engine_models import (GREEDY, dense_greedy, frozen_clock, random_model,
                                             run_to_completion, tokens_of)
from tests.engine.model.lora_writers import merged_weights, random_pairs, write_adapter

BS = 4
PROMPT = tuple(range(3, 20))
MAX_TOKENS = 5


def _adapter(tmp_path, model, name: str, seed: int, modules=("q_proj", "v_proj")):
    ranks = {f"model.layers.{i}.self_attn.{m}": 4 for i in range(model.config.num_layers)
             for m in modules}
    pairs = random_pairs(model, ranks, seed)
    write_adapter(tmp_path / name, pairs, r=4, lora_alpha=8, target_modules=list(modules))
    merged = dataclasses.replace(model, weights=merged_weights(model, pairs, {m: 2.0 for m in pairs}))
    return load_adapter(tmp_path / name, model.config, name=name), merged


def _engine(model, **config) -> Engine:
    return Engine(model, EngineConfig(block_size=BS, num_kv_blocks=64, prefix_cache="none", **config),
                  clock=frozen_clock)         # drafting does not depend on the machine's speed


def _run(engine, *adapters) -> list[list[int]]:
    """One request per adapter (None: the base), all added before the first step."""
    ids = [engine.add_request(GenRequest(prompt=PROMPT, params=GREEDY, max_tokens=MAX_TOKENS,
                                         scope=CacheScope(adapter=a))) for a in adapters]
    outs = run_to_completion(engine)
    return [tokens_of(outs[i]) for i in ids]


def _paths(engine) -> tuple[int, int]:
    stats = engine.stats()
    return stats.lora_merged_steps_total, stats.lora_grouped_steps_total


def test_a_step_on_one_adapter_alone_is_merged_and_a_mixed_step_is_grouped(tmp_path):
    model = random_model()
    a, merged_a = _adapter(tmp_path, model, "a", seed=1)
    engine = _engine(model)
    want_a, want_base = dense_greedy(merged_a, PROMPT, MAX_TOKENS), dense_greedy(model, PROMPT, MAX_TOKENS)
    assert want_a != want_base                                         # the check can tell
    assert _run(engine, a) == [want_a]
    steps = engine.stats().steps_total
    assert _paths(engine) == (steps, 0)                                # every step merged
    assert engine.stats().lora_merged_adapter == "a" and engine.stats().lora_merged_bytes > 0
    assert _run(engine, a, None) == [want_a, want_base]                # beside a base row
    assert _paths(engine) == (steps, engine.stats().steps_total - steps)   # every step grouped
    before = _paths(engine)
    assert _run(engine, None) == [want_base]                           # no adapter rows: neither
    assert _paths(engine) == before
    off = _engine(model, lora_merge=False)                             # the switch: all grouped
    assert _run(off, a) == [want_a]
    assert _paths(off) == (0, off.stats().steps_total)
    assert off.stats().lora_merged_bytes == 0 and off.stats().lora_merges_built_total == 0


def test_switching_adapters_rebuilds_once_per_switch_and_each_answers_its_own(tmp_path):
    """A alone -> B alone -> A and B in the same steps -> A alone."""
    model = random_model()
    a, merged_a = _adapter(tmp_path, model, "a", seed=1)
    b, merged_b = _adapter(tmp_path, model, "b", seed=2, modules=("o_proj",))
    want = {"a": dense_greedy(merged_a, PROMPT, MAX_TOKENS), "b": dense_greedy(merged_b, PROMPT, MAX_TOKENS)}
    assert want["a"] != want["b"]
    engine = _engine(model)
    seen = []
    for adapters in ((a,), (b,), (a, b), (a,)):
        answers = _run(engine, *adapters)
        assert answers == [want[x.name] for x in adapters], [x.name for x in adapters]
        stats = engine.stats()
        seen.append((stats.lora_merged_adapter, stats.lora_merges_built_total,
                     stats.lora_grouped_steps_total > 0, stats.lora_merged_bytes))
    layers, layer = model.config.num_layers, model.weights.layers[0]
    a_bytes, b_bytes = layers * layer.wqkv.nbytes, layers * layer.wo.nbytes   # q, v: wqkv; o: wo
    # the mixed run keeps b's copy (grouped steps do not drop it); a alone builds a's again
    assert seen == [("a", 1, False, a_bytes), ("b", 2, False, b_bytes), ("b", 2, True, b_bytes),
                    ("a", 3, True, a_bytes)]


def test_an_unloaded_adapter_s_merged_copy_is_freed_and_never_built_again(tmp_path):
    model = random_model()
    a, merged_a = _adapter(tmp_path, model, "a", seed=1)
    b, merged_b = _adapter(tmp_path, model, "b", seed=2)
    engine = _engine(model)
    rid = engine.add_request(GenRequest(prompt=PROMPT, params=GREEDY, max_tokens=MAX_TOKENS,
                                        scope=CacheScope(adapter=a)))
    outs = list(engine.step())                                         # its prefill, merged
    held = weakref.ref(engine.runner.merges.current)
    assert engine.stats().lora_merged_adapter == "a"
    engine.forget_adapter(a)                                           # unloaded mid-request
    assert held() is None                                              # the copy is gone
    stats = engine.stats()
    assert (stats.lora_merged_adapter, stats.lora_merged_bytes) == ("", 0)
    merged_steps = stats.lora_merged_steps_total
    for token_outs in run_to_completion(engine).values():
        outs += token_outs
    assert tokens_of([o for o in outs if o.id == rid]) == dense_greedy(merged_a, PROMPT, MAX_TOKENS)
    assert _run(engine, a) == [dense_greedy(merged_a, PROMPT, MAX_TOKENS)]   # still served, grouped
    stats = engine.stats()
    assert (stats.lora_merged_steps_total, stats.lora_merges_built_total) == (merged_steps, 1)
    assert stats.lora_merged_bytes == 0
    assert _run(engine, b) == [dense_greedy(merged_b, PROMPT, MAX_TOKENS)]   # another merges
    assert engine.stats().lora_merged_adapter == "b"


def test_speculative_verification_rows_on_one_adapter_run_merged_and_keep_its_answer(tmp_path):
    """A repetitive prompt makes prompt lookup draft: the verify rows (the last token and its
    drafts) are one adapter's rows alone, so those steps run merged too."""
    model = random_model(seed=2)
    a, merged_a = _adapter(tmp_path, model, "a", seed=1)
    passage = (5, 9, 14, 2, 30, 11)
    prompt = passage * 3 + passage[:2]
    spec = SpeculativeConfig(method="prompt_lookup", num_speculative_tokens=4, prompt_lookup_min=1,
                             prompt_lookup_max=3)
    engine = _engine(model, speculative=spec)
    rid = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=16,
                                        scope=CacheScope(adapter=a)))
    tokens = tokens_of(run_to_completion(engine)[rid])
    stats = engine.stats()
    assert stats.spec_draft_tokens > 0                                 # verify rows ran
    assert (stats.lora_merged_steps_total, stats.lora_grouped_steps_total) == (stats.steps_total, 0)
    assert tokens == dense_greedy(merged_a, prompt, 16)
