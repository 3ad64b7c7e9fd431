"""PEFT's per-module rules on adapters the tests write, against an independent numpy merge.

The oracle's real adapters leave rank_pattern, alpha_pattern, regex target_modules and
layers_to_transform at their defaults, so these are checked here: a test writes a tiny
adapter, states which modules it changes with which r and alpha (worked out by hand from
PEFT's rules, oracle README), merges `W + scaling * B @ A` with numpy
(tests/engine/model/lora_writers.py), and runs the adapter's rows unmerged through the
runner beside plain base rows, in one step. A rule read wrong either refuses the file (a
rank or a module the config does not give) or moves the logits far beyond the tolerance.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.errors import ModelFormatError
from engine.model import llama
from engine.model.loader import load_model
from engine.model.lora import load_adapter
from tests.engine.core.engine_models import random_model
from tests.engine.model.lora_writers import (merged_weights, prompt_logits, random_pairs,
                                             write_adapter)
from tests.oracle import ORACLE_DIR

TOLERANCE = 2e-4
PROMPTS = [(3, 17, 5, 40, 22, 9, 61), (8, 1, 33, 12)]


def _proj(layer: int, leaf: str) -> str:
    prefix = "self_attn" if leaf in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
    return f"model.layers.{layer}.{prefix}.{leaf}"


def _check(model, folder, pairs, scalings):
    """The adapter's rows equal the merged model's dense forward; the base rows (same step)
    the base's; and the adapter moves the logits well beyond the tolerance."""
    adapter = load_adapter(folder, model.config)
    assert set(adapter.modules) == set(pairs)
    merged = merged_weights(model, pairs, scalings)
    got = prompt_logits(model, PROMPTS + PROMPTS, [adapter] * len(PROMPTS) + [None] * len(PROMPTS))
    for prompt, with_adapter, plain in zip(PROMPTS, got[:len(PROMPTS)], got[len(PROMPTS):]):
        want = llama.forward(model.config, merged, prompt)                    # [n, V]
        base = llama.forward(model.config, model.weights, prompt)
        np.testing.assert_allclose(with_adapter, want, atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(plain, base, atol=TOLERANCE, rtol=0)
        assert np.abs(want - base).max() > 100 * TOLERANCE


@pytest.fixture(scope="module")
def base():
    return random_model(layers=3, seed=11)


def test_rank_pattern_sets_each_modules_rank_and_the_first_matching_key_wins(base, tmp_path):
    # r 4 by default; the first key (file order) whose "(.*\.)?(key)$" matches decides:
    # layer 1's q_proj -> 3 (named first), the other q_proj -> 6, every v_proj -> 2.
    ranks = {}
    for i in range(3):
        ranks.update({_proj(i, "q_proj"): 3 if i == 1 else 6, _proj(i, "k_proj"): 4,
                      _proj(i, "v_proj"): 2})
    pairs = random_pairs(base, ranks, seed=1)
    folder = write_adapter(tmp_path / "adapter", pairs, r=4, lora_alpha=8,
                           target_modules=["q_proj", "k_proj", "v_proj"],
                           rank_pattern={"layers.1.self_attn.q_proj": 3, "v_proj": 2,
                                         "q_proj": 6})
    _check(base, folder, pairs, {m: 8 / r for m, r in ranks.items()})


def test_alpha_pattern_and_rslora_set_each_modules_scaling(base, tmp_path):
    # rslora: alpha / sqrt(r); o_proj's alpha 32 (pattern), down_proj's the global 4.
    modules = [_proj(i, leaf) for i in range(3) for leaf in ("o_proj", "down_proj")]
    pairs = random_pairs(base, {m: 4 for m in modules}, seed=2)
    folder = write_adapter(tmp_path / "adapter", pairs, r=4, lora_alpha=4, use_rslora=True,
                           target_modules=["o_proj", "down_proj"], alpha_pattern={"o_proj": 32})
    scalings = {m: (32 if m.endswith("o_proj") else 4) / math.sqrt(4) for m in modules}
    _check(base, folder, pairs, scalings)


def test_a_regex_target_must_match_the_whole_module_name(base, tmp_path):
    regex = r"model\.layers\.[12]\.(self_attn\.k_proj|mlp\.(gate|up)_proj)"
    modules = [_proj(i, leaf) for i in (1, 2) for leaf in ("k_proj", "gate_proj", "up_proj")]
    pairs = random_pairs(base, {m: 2 for m in modules}, seed=3)
    folder = write_adapter(tmp_path / "adapter", pairs, r=2, lora_alpha=6, target_modules=regex)
    _check(base, folder, pairs, {m: 3.0 for m in modules})
    # "k_proj" alone does not fullmatch "model.layers.0.self_attn.k_proj": the file's
    # weights for it are then for a module the config does not select
    extra = random_pairs(base, {_proj(0, "k_proj"): 2}, seed=4)
    write_adapter(tmp_path / "unselected", {**pairs, **extra}, r=2, lora_alpha=6,
                  target_modules="k_proj|" + regex)
    with pytest.raises(ModelFormatError, match=r"model\.layers\.0\.self_attn\.k_proj.*do not select"):
        load_adapter(tmp_path / "unselected", base.config)


def test_layers_to_transform_keeps_its_layers_but_a_full_name_is_always_adapted(base, tmp_path):
    # suffix entries are kept in layers 0 and 2 only; the full name in layer 1 regardless
    modules = [_proj(i, leaf) for i in (0, 2) for leaf in ("q_proj", "up_proj")]
    modules.append(_proj(1, "v_proj"))
    pairs = random_pairs(base, {m: 4 for m in modules}, seed=5)
    folder = write_adapter(tmp_path / "adapter", pairs, r=4, lora_alpha=8,
                           target_modules=["q_proj", "up_proj", _proj(1, "v_proj")],
                           layers_to_transform=[0, 2])
    _check(base, folder, pairs, {m: 2.0 for m in modules})
    # weights for layer 1's q_proj: a module the layer filter leaves out
    extra = random_pairs(base, {_proj(1, "q_proj"): 4}, seed=6)
    write_adapter(tmp_path / "filtered", {**pairs, **extra}, r=4, lora_alpha=8,
                  target_modules=["q_proj", "up_proj", _proj(1, "v_proj")],
                  layers_to_transform=[0, 2])
    with pytest.raises(ModelFormatError, match=r"model\.layers\.1\.self_attn\.q_proj"):
        load_adapter(tmp_path / "filtered", base.config)


def test_layers_pattern_and_a_single_layer_index(base, tmp_path):
    modules = [_proj(1, "down_proj")]
    pairs = random_pairs(base, {m: 2 for m in modules}, seed=7)
    folder = write_adapter(tmp_path / "adapter", pairs, r=2, lora_alpha=2,
                           target_modules=["down_proj"], layers_to_transform=1,
                           layers_pattern="layers")
    _check(base, folder, pairs, {m: 1.0 for m in modules})
    # a pattern no module name has ("blocks.N."): no layer index, so nothing is selected
    write_adapter(tmp_path / "blocks", pairs, r=2, lora_alpha=2, target_modules=["down_proj"],
                  layers_to_transform=1, layers_pattern=["blocks"])
    with pytest.raises(ModelFormatError, match=r"model\.layers\.1\.mlp\.down_proj.*do not select"):
        load_adapter(tmp_path / "blocks", base.config)


def test_all_linear_adapts_every_projection(base, tmp_path):
    leaves = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    modules = [_proj(i, leaf) for i in range(3) for leaf in leaves]
    pairs = random_pairs(base, {m: 2 for m in modules}, seed=8, gain=0.3)
    folder = write_adapter(tmp_path / "adapter", pairs, r=2, lora_alpha=4,
                           target_modules="all-linear")
    _check(base, folder, pairs, {m: 2.0 for m in modules})
    del pairs[_proj(2, "up_proj")]                     # all-linear selects it: it must be there
    write_adapter(tmp_path / "missing", pairs, r=2, lora_alpha=4, target_modules="all-linear")
    with pytest.raises(ModelFormatError, match=r"model\.layers\.2\.mlp\.up_proj"):
        load_adapter(tmp_path / "missing", base.config)


def test_qwen2_biases_stay_in_the_base_projection_under_an_adapter(tmp_path):
    """Qwen2's q/k/v have biases: y = x W^T + b + scaling * x A^T B^T (LoRA adds none)."""
    model = load_model(ORACLE_DIR / "families" / "qwen2-tiny" / "model")
    assert model.weights.layers[0].bqkv is not None
    layers = range(model.config.num_layers)
    modules = [_proj(i, leaf) for i in layers for leaf in ("q_proj", "k_proj", "v_proj")]
    pairs = random_pairs(model, {m: 4 for m in modules}, seed=9, gain=2.0)
    folder = write_adapter(tmp_path / "adapter", pairs, r=4, lora_alpha=8,
                           target_modules=["q_proj", "k_proj", "v_proj"])
    _check(model, folder, pairs, {m: 2.0 for m in modules})


def test_interleaved_rows_of_two_adapters_and_the_base_in_one_step(base, tmp_path):
    """Rows of one adapter that are not one run (base rows between them) still get it."""
    one = random_pairs(base, {_proj(i, "q_proj"): 2 for i in range(3)}, seed=10)
    two = random_pairs(base, {_proj(i, "down_proj"): 3 for i in range(3)}, seed=11)
    first = load_adapter(write_adapter(tmp_path / "one", one, r=2, lora_alpha=4,
                                       target_modules=["q_proj"]), base.config)
    second = load_adapter(write_adapter(tmp_path / "two", two, r=3, lora_alpha=3,
                                        target_modules=["down_proj"]), base.config)
    merged = {first: merged_weights(base, one, {m: 2.0 for m in one}),
              second: merged_weights(base, two, {m: 1.0 for m in two}), None: base.weights}
    order = [first, None, second, first, second, None]
    prompts = [PROMPTS[i % 2] for i in range(len(order))]
    got = prompt_logits(base, prompts, order)
    for prompt, adapter, logits in zip(prompts, order, got):
        want = llama.forward(base.config, merged[adapter], prompt)
        np.testing.assert_allclose(logits, want, atol=TOLERANCE, rtol=0)


def test_half_precision_weights_are_read_as_float32(base, tmp_path):
    """PEFT saves an adapter trained in float16 as F16 tensors: the same maths on the
    rounded values."""
    modules = [_proj(i, leaf) for i in range(3) for leaf in ("q_proj", "v_proj")]
    pairs = random_pairs(base, {m: 4 for m in modules}, seed=12)
    folder = write_adapter(tmp_path / "adapter", pairs, dtype="F16", r=4, lora_alpha=8)
    rounded = {m: (a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32))
               for m, (a, b) in pairs.items()}
    _check(base, folder, rounded, {m: 2.0 for m in modules})
