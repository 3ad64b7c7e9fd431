"""Tiny PEFT adapters written by the tests, and the independent merge they are checked by.

`write_adapter` writes a folder as PEFT 0.21's `save_pretrained` does (adapter_config.json
with its defaults, adapter_model.safetensors with `base_model.model.<module>.lora_A.weight`
[r, in] and `...lora_B.weight` [out, r]); `merged_weights` adds `scaling * B @ A` into a
copy of the base's weights with numpy, in the fused input-major columns engine/model/spec.py
documents (wqkv: q | k | v, w_gate_up: gate | up), without any of engine/model/lora*.py.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from engine.core.chunk import Chunk
from engine.core.runner import ModelRunner
from engine.kv.pools import KVCache
from engine.model.spec import LlamaWeights, Model
from tests.formats_writers import write_safetensors

PEFT_DEFAULTS = {
    "alora_invocation_tokens": None, "alpha_pattern": {}, "arrow_config": None,
    "auto_mapping": None, "base_model_name_or_path": "written-by-a-test", "bias": "none",
    "corda_config": None, "ensure_weight_tying": False, "eva_config": None,
    "exclude_modules": None, "fan_in_fan_out": False, "inference_mode": True,
    "init_lora_weights": True, "kasa_config": None, "layer_replication": None,
    "layers_pattern": None, "layers_to_transform": None, "loftq_config": {}, "lora_alpha": 8,
    "lora_bias": False, "lora_dropout": 0.0, "lora_ga_config": None, "megatron_config": None,
    "megatron_core": "megatron.core", "modules_to_save": None, "monteclora_config": None,
    "peft_type": "LORA", "peft_version": "0.21.2", "qalora_group_size": 16, "r": 4,
    "rank_pattern": {}, "revision": None, "target_modules": ["q_proj", "v_proj"],
    "target_parameters": None, "task_type": "CAUSAL_LM", "trainable_token_indices": None,
    "use_bdlora": None, "use_dora": False, "use_qalora": False, "use_rslora": False,
    "velora_config": None,
}
BLOCK_SIZE = 4


def module_shape(model: Model, module: str) -> tuple[int, int]:
    """(out_features, in_features) of `model.layers.N.<proj>` in this base."""
    cfg = model.config
    d, ff, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.q_size, cfg.kv_size
    leaf = module.rsplit(".", 1)[-1]
    return {"q_proj": (q, d), "k_proj": (kv, d), "v_proj": (kv, d), "o_proj": (d, q),
            "gate_proj": (ff, d), "up_proj": (ff, d), "down_proj": (d, ff)}[leaf]


def random_pairs(model: Model, ranks: dict[str, int], seed: int, gain: float = 0.6
                 ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """module -> (A [r, in], B [out, r]) random float32, large enough to move the logits."""
    rng = np.random.default_rng(seed)
    pairs = {}
    for module, r in ranks.items():
        out_dim, in_dim = module_shape(model, module)
        a = (rng.standard_normal((r, in_dim)) / np.sqrt(in_dim)).astype(np.float32)
        b = (rng.standard_normal((out_dim, r)) * gain / np.sqrt(r)).astype(np.float32)
        pairs[module] = (a, b)
    return pairs


def write_adapter(folder: Path, pairs: dict[str, tuple[np.ndarray, np.ndarray]],
                  extra_tensors: dict[str, np.ndarray] | None = None, dtype: str = "F32",
                  **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({**PEFT_DEFAULTS, **config},
                                                           indent=2), encoding="utf-8")
    tensors = {}
    for module, (a, b) in pairs.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = a
        tensors[f"base_model.model.{module}.lora_B.weight"] = b
    tensors.update(extra_tensors or {})
    write_safetensors(folder / "adapter_model.safetensors", tensors,
                      dtypes={name: dtype for name in tensors}, metadata={"format": "pt"})
    return folder


def merged_weights(model: Model, pairs: dict[str, tuple[np.ndarray, np.ndarray]],
                   scalings: dict[str, float]) -> LlamaWeights:
    """A copy of the base's weights with W' = W + scaling * B @ A for every module."""
    cfg = model.config
    q, kv, ff = cfg.q_size, cfg.kv_size, cfg.intermediate_size
    columns = {"q_proj": ("wqkv", 0, q), "k_proj": ("wqkv", q, q + kv),
               "v_proj": ("wqkv", q + kv, q + 2 * kv), "o_proj": ("wo", 0, cfg.hidden_size),
               "gate_proj": ("w_gate_up", 0, ff), "up_proj": ("w_gate_up", ff, 2 * ff),
               "down_proj": ("w_down", 0, cfg.hidden_size)}
    layers = [{f.name: getattr(layer, f.name) for f in dataclasses.fields(layer)}
              for layer in model.weights.layers]
    for fields in layers:
        for name in ("wqkv", "wo", "w_gate_up", "w_down"):
            fields[name] = fields[name].astype(np.float64)          # merged in float64
    for module, (a, b) in pairs.items():
        parts = module.split(".")
        matrix, first, stop = columns[parts[-1]]
        delta = scalings[module] * (b.astype(np.float64) @ a.astype(np.float64))   # [out, in]
        layers[int(parts[2])][matrix][:, first:stop] += delta.T                   # [in, out]
    for fields in layers:
        for name in ("wqkv", "wo", "w_gate_up", "w_down"):
            fields[name] = fields[name].astype(np.float32)
    new_layers = tuple(type(model.weights.layers[0])(**fields) for fields in layers)
    return dataclasses.replace(model.weights, layers=new_layers)


def prompt_logits(model: Model, prompts: list[tuple[int, ...]], adapters: list) -> list[np.ndarray]:
    """Every position's logits of each prompt, all prompts in ONE runner step, each chunk on
    its adapter (None: the base) -> [n_i, V] per prompt."""
    blocks = -(-max(len(p) for p in prompts) // BLOCK_SIZE)
    kv = KVCache(model.config, blocks * len(prompts), BLOCK_SIZE)
    runner = ModelRunner(model.config, model.weights, kv, 256)
    chunks = [Chunk(tuple(p), 0, tuple(range(i * blocks, (i + 1) * blocks)), len(p), i,
                    adapter=adapter) for i, (p, adapter) in enumerate(zip(prompts, adapters))]
    logits = runner.forward(chunks)                                  # [sum n_i, V]
    bounds = np.cumsum([0] + [len(p) for p in prompts])
    return [logits[bounds[i]:bounds[i + 1]] for i in range(len(prompts))]
