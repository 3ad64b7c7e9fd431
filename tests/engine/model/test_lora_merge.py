"""A step on one adapter alone runs on merged weights (engine/model/lora_merge.py).

Checked on tiny random models of every family (Qwen2's biases, Qwen3's q/k norms, Gemma 3's
post-norms, GeGLU and sliding windows) with an adapter on all seven projections, so every
fused weight is merged: the runner's logits on the merged path equal those of the grouped
path (the same runner with `lora_merge=False`) within float32 rounding, and both equal an
independent numpy merge's dense forward. What is copied and what is shared is checked on
the merged layers themselves.
"""
from __future__ import annotations

import pytest
import numpy as np

from engine.core.chunk import Chunk
from engine.core.runner import ModelRunner
from engine.kv.pools import KVCache
from engine.model import llama
from engine.model.lora import load_adapter
from engine.model.lora_merge import merge_layers
from tests.engine.core.family_models import FAMILY_NAMES, family_model
from tests.engine.model.lora_writers import merged_weights, random_pairs, write_adapter

BLOCK_SIZE = 4
PROMPTS = [(3, 17, 5, 40, 22, 9, 61, 7, 30, 12, 44), (8, 1, 33, 12)]   # 11 tokens > gemma's window
PATHS_AGREE = 1.5e-4            # merged vs grouped: float32 summation order only (logits up to ~30)
MERGE_TOLERANCE = 2e-4          # either vs the float64 numpy merge (tests/engine/model/test_lora_rules.py's)
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _all_linear(tmp_path, model, seed: int = 3):
    """An adapter on every projection of every layer (r 4, alpha 8: scaling 2)."""
    ranks = {f"model.layers.{i}.{p}": 4 for i in range(model.config.num_layers) for p in PROJECTIONS}
    pairs = random_pairs(model, ranks, seed)
    write_adapter(tmp_path / "all", pairs, r=4, lora_alpha=8,
                  target_modules=[p.rsplit(".", 1)[1] for p in PROJECTIONS])
    return load_adapter(tmp_path / "all", model.config, name="all"), pairs


def _logits(model, adapter, lora_merge: bool):
    """Every prompt's logits, all prompts in ONE step on `adapter`; and the runner."""
    blocks = -(-max(len(p) for p in PROMPTS) // BLOCK_SIZE)
    kv = KVCache(model.config, blocks * len(PROMPTS), BLOCK_SIZE)
    runner = ModelRunner(model.config, model.weights, kv, 256, lora_merge=lora_merge)
    chunks = [Chunk(p, 0, tuple(range(i * blocks, (i + 1) * blocks)), len(p), i, adapter=adapter)
              for i, p in enumerate(PROMPTS)]
    logits = runner.forward(chunks)                                 # [sum n_i, V]
    bounds = np.cumsum([0] + [len(p) for p in PROMPTS])
    return [logits[bounds[i]:bounds[i + 1]] for i in range(len(PROMPTS))], runner


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_merged_and_grouped_steps_give_the_same_logits_and_the_numpy_merge_s(family, tmp_path):
    model = family_model(family)
    adapter, pairs = _all_linear(tmp_path, model)
    merged_got, merged_runner = _logits(model, adapter, lora_merge=True)
    grouped_got, grouped_runner = _logits(model, adapter, lora_merge=False)
    assert (merged_runner.merges.merged_steps_total, merged_runner.merges.grouped_steps_total) == (1, 0)
    assert (grouped_runner.merges.merged_steps_total, grouped_runner.merges.grouped_steps_total) == (0, 1)
    reference = merged_weights(model, pairs, {m: 2.0 for m in pairs})
    for prompt, merged, grouped in zip(PROMPTS, merged_got, grouped_got):
        np.testing.assert_allclose(merged, grouped, atol=PATHS_AGREE, rtol=0)
        want = llama.forward(model.config, reference, prompt)                  # [n, V]
        np.testing.assert_allclose(merged, want, atol=MERGE_TOLERANCE, rtol=0)
        base = llama.forward(model.config, model.weights, prompt)
        assert np.abs(want - base).max() > 100 * MERGE_TOLERANCE               # the check can tell


def test_only_the_fused_weights_an_adapter_changes_are_copied(tmp_path):
    model = family_model("qwen2")
    cfg = model.config
    layers = range(cfg.num_layers)
    ranks = {f"model.layers.{i}.self_attn.v_proj": 2 for i in layers}
    ranks["model.layers.1.mlp.down_proj"] = 2                      # one layer's down as well
    write_adapter(tmp_path / "v", random_pairs(model, ranks, seed=4), r=2, lora_alpha=2,
                  target_modules=r"model\.layers\.\d+\.self_attn\.v_proj|model\.layers\.1\.mlp\.down_proj")
    adapter = load_adapter(tmp_path / "v", cfg)
    merged = merge_layers(model.weights.layers, adapter)
    for i, (own, base) in enumerate(zip(merged.layers, model.weights.layers)):
        assert own.wqkv is not base.wqkv and not np.array_equal(own.wqkv, base.wqkv)
        assert own.wo is base.wo and own.w_gate_up is base.w_gate_up
        assert (own.w_down is base.w_down) == (i != 1)
        assert own.bqkv is base.bqkv and own.attn_norm is base.attn_norm
    assert merged.nbytes == cfg.num_layers * model.weights.layers[0].wqkv.nbytes + \
        model.weights.layers[1].w_down.nbytes
    assert merged.adapter is adapter
