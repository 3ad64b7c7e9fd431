"""A PEFT LoRA adapter folder -> `LoraAdapter`: its low-rank products, fitted to one base.

The folder holds `adapter_config.json` (engine/model/lora_config.py) and
`adapter_model.safetensors` with, for each adapted module m,
`base_model.model.<m>.lora_A.weight` [r, in] and `base_model.model.<m>.lora_B.weight`
[out, r]; the module's output becomes `x W^T + scaling * (x A^T) B^T`.

The engine keeps a layer's weights input-major and fused (engine/model/spec.py: `wqkv`
columns q | k | v, `w_gate_up` columns gate | up), so an adapted module must land in its
columns of the fused matrix. Per fused weight of a layer the loader builds ONE pair

    a [in, R]      the modules' A^T side by side              (R = r_1 + r_2 + ...)
    b [R, out]     scaling_i * B_i^T in module i's rank rows and output columns, 0 elsewhere

so that `(x @ a) @ b` [n, out] is, column for column, each module's own
`scaling * x A^T B^T`: two small matmuls per fused weight, and the zeros add exactly
nothing. Q and K rows are in Hugging Face's order in the engine (the loader un-permutes a
GGUF's) as in the adapter, so B needs no permutation. The base weights are never touched:
kept apart, one base serves rows of many adapters in the same batch
(engine/model/lora_batch.py). Only a step whose rows all run on one adapter runs on merged
weights, `W + a @ b` in a copy of the fused weights that adapter changes, one adapter at a
time (engine/model/lora_merge.py).

Refused, naming the file and the key (`ModelFormatError`, or `UnsupportedModel` for maths
not implemented): tensors other than lora_A / lora_B weights (DoRA magnitudes, LoRA
biases, embedding or LM-head adapters, saved whole modules), modules that are not the
decoder's projections (an adapter for another architecture), layers or shapes the base
does not have, a rank that disagrees with the config, and a file whose modules are not
exactly those the config selects.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import ModelFormatError, UnsupportedModel
from engine.formats.safetensors import SafetensorsFile
from engine.model.lora_config import LoraConfig, read_lora_config
from engine.model.spec import ModelConfig

WEIGHTS_FILE = "adapter_model.safetensors"
KEY = re.compile(r"base_model\.model\.(?P<module>.+)\.lora_(?P<half>[AB])\.weight")
MODULE = re.compile(r"model\.layers\.(?P<layer>\d+)\.(?P<proj>self_attn\.[qkvo]_proj|"
                    r"mlp\.(?:gate|up|down)_proj)")
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
# Words for tensors a LoRA-only reader meets in other adapters: (key fragment, what it is).
FOREIGN_TENSORS = (("lora_magnitude_vector", "a DoRA magnitude"),
                   ("lora_embedding_", "an embedding adapter"),
                   ("modules_to_save", "a saved whole module"),
                   ("trainable_tokens", "trained embedding rows"),
                   (".lora_B.bias", "a LoRA bias"))


@dataclass(frozen=True, slots=True)
class LowRank:
    """One fused weight's adapter product: rows x [n, in] -> (x @ a) @ b [n, out]."""
    a: np.ndarray                   # [in, R]    A^T of each adapted module, side by side
    b: np.ndarray                   # [R, out]   scaling * B^T, each in its module's columns


@dataclass(frozen=True, slots=True)
class LoraLayer:
    """One decoder layer's products (None: the adapter leaves that weight alone)."""
    qkv: LowRank | None = None      # [d, R] @ [R, H*hd + 2*KV*hd]
    o: LowRank | None = None        # [H*hd, R] @ [R, d]
    gate_up: LowRank | None = None  # [d, R] @ [R, 2*ff]
    down: LowRank | None = None     # [ff, R] @ [R, d]


@dataclass(frozen=True, eq=False)
class LoraAdapter:
    """A loaded adapter: what `load_adapter` returns. Compared by identity: one object per
    load, so a batch groups its rows by it (engine/model/lora_batch.py)."""
    name: str
    path: str                       # the folder it came from
    layers: tuple[LoraLayer, ...]   # one per base layer
    modules: tuple[str, ...]        # the adapted module names, sorted
    max_rank: int                   # the largest r of any module
    num_parameters: int             # the file's A and B values


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a projection lands: its fused weight and that weight's columns."""
    target: str                     # a LoraLayer field: qkv, o, gate_up or down
    in_features: int
    first_column: int
    out_features: int


@dataclass(frozen=True, slots=True)
class _Module:
    """One adapted module, read and scaled, waiting to be fused with its neighbours."""
    place: _Place
    a: np.ndarray                   # [r, in]
    scaled_bt: np.ndarray           # [r, out_i]   scaling * B^T


def _module_places(cfg: ModelConfig) -> dict[str, _Place]:
    """Each projection's fused weight and columns in this base (engine/model/spec.py)."""
    d, ff, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.q_size, cfg.kv_size
    return {"self_attn.q_proj": _Place("qkv", d, 0, q),
            "self_attn.k_proj": _Place("qkv", d, q, kv),
            "self_attn.v_proj": _Place("qkv", d, q + kv, kv),
            "self_attn.o_proj": _Place("o", q, 0, d),
            "mlp.gate_proj": _Place("gate_up", d, 0, ff),
            "mlp.up_proj": _Place("gate_up", d, ff, ff),
            "mlp.down_proj": _Place("down", ff, 0, d)}


def load_adapter(folder: str | Path, base: ModelConfig, name: str | None = None,
                 scale: float = 1.0) -> LoraAdapter:
    """Read a PEFT LoRA folder and fit it to `base` (see the module docstring); `scale`
    multiplies every module's product (llama-server's `--lora-scaled`; 1: PEFT's own)."""
    folder = Path(folder)
    config = read_lora_config(folder)
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise ModelFormatError(path, "no adapter_model.safetensors beside adapter_config.json")
    weights = SafetensorsFile(path)
    pairs = _module_pairs(weights, base)                            # module -> (A key, B key)
    _check_selection(config, set(pairs), base, weights.path)
    places = _module_places(base)
    parts: list[dict[str, list[_Module]]] = [{} for _ in range(base.num_layers)]   # per layer, by target
    num_parameters, max_rank = 0, 0
    for module, (key_a, key_b) in sorted(pairs.items()):
        found = MODULE.fullmatch(module)
        place = places[found["proj"]]
        a, b = weights.tensor(key_a), weights.tensor(key_b)         # [r, in], [out, r]
        r = _check_shapes(config, module, place, a, b, key_a, key_b, weights.path)
        scaled_bt = b.T * np.float32(config.scaling(module) * scale)   # [r, out_i]
        parts[int(found["layer"])].setdefault(place.target, []).append(_Module(place, a, scaled_bt))
        num_parameters += a.size + b.size
        max_rank = max(max_rank, r)
    layers = tuple(LoraLayer(**{target: _fused(pieces, places) for target, pieces in p.items()})
                   for p in parts)
    return LoraAdapter(name=name or folder.name, path=str(folder), layers=layers,
                       modules=tuple(sorted(pairs)), max_rank=max_rank,
                       num_parameters=num_parameters)


def _module_pairs(weights: SafetensorsFile, base: ModelConfig) -> dict[str, tuple[str, str]]:
    """Every module of the file with its lora_A and lora_B keys, each checked by name."""
    halves: dict[str, dict[str, str]] = {}
    for key in weights.names():
        found = KEY.fullmatch(key)
        if found is None:
            raise UnsupportedModel(weights.path, f"tensor {key}: {_foreign(key)} is not "
                                                 f"supported (only lora_A / lora_B weights)")
        module = found["module"]
        _check_module(module, key, base, weights.path)
        halves.setdefault(module, {})[found["half"]] = key
    if not halves:
        raise ModelFormatError(weights.path, "no LoRA weights (no *.lora_A.weight tensors)")
    for module, keys in halves.items():
        for half in "AB":
            if half not in keys:
                raise ModelFormatError(weights.path, f"missing tensor base_model.model."
                                                     f"{module}.lora_{half}.weight")
    return {module: (keys["A"], keys["B"]) for module, keys in halves.items()}


def _foreign(key: str) -> str:
    return next((what for fragment, what in FOREIGN_TENSORS if fragment in key),
                "a tensor that is not a LoRA weight")


def _check_module(module: str, key: str, base: ModelConfig, path: str) -> None:
    """The module must be a projection of this decoder, in a layer the base has."""
    found = MODULE.fullmatch(module)
    if found is None:
        leaf = module.rsplit(".", 1)[-1]
        what = ("an LM-head adapter" if leaf == "lm_head" else
                "an embedding adapter" if leaf == "embed_tokens" else
                f"module {module} is not a projection of this decoder (an adapter for "
                f"another architecture?), and it")
        raise UnsupportedModel(path, f"tensor {key}: {what} is not supported")
    layer = int(found["layer"])
    if layer >= base.num_layers:
        raise ModelFormatError(path, f"tensor {key}: layer {layer}, but the base model has "
                                     f"{base.num_layers} layers (an adapter for another base?)")


def _check_selection(config: LoraConfig, in_file: set[str], base: ModelConfig,
                     path: str) -> None:
    """The file's modules are exactly those the config selects among the base's."""
    for module in sorted(in_file):
        if not config.selects(module):
            raise ModelFormatError(path, f"tensors of {module}: {config.path}'s target_modules"
                                         f" / layers_to_transform do not select that module")
    for layer in range(base.num_layers):
        for proj in PROJECTIONS:
            module = f"model.layers.{layer}.{proj}"
            if module not in in_file and config.selects(module):
                raise ModelFormatError(path, f"missing tensor base_model.model.{module}."
                                             f"lora_A.weight (target_modules selects it)")


def _check_shapes(config: LoraConfig, module: str, place: _Place, a: np.ndarray,
                  b: np.ndarray, key_a: str, key_b: str, path: str) -> int:
    """A [r, in] and B [out, r] as the base's module and the config's rank want; r."""
    r = config.rank(module)
    if a.shape != (r, place.in_features):
        raise ModelFormatError(path, f"tensor {key_a} has shape {list(a.shape)}, expected "
                                     f"{[r, place.in_features]} (rank {r} from the config, "
                                     f"{place.in_features} inputs from the base)")
    if b.shape != (place.out_features, r):
        raise ModelFormatError(path, f"tensor {key_b} has shape {list(b.shape)}, expected "
                                     f"{[place.out_features, r]} ({place.out_features} "
                                     f"outputs from the base, rank {r} from the config)")
    return r


def _fused(modules: list[_Module], places: dict[str, _Place]) -> LowRank:
    """The modules of one fused weight -> one (a, b) pair (module docstring)."""
    target = modules[0].place.target
    out = sum(p.out_features for p in places.values() if p.target == target)   # fused width
    a = np.ascontiguousarray(np.concatenate([m.a.T for m in modules], axis=1),
                             dtype=np.float32)                      # [in, R]
    b = np.zeros((a.shape[1], out), dtype=np.float32)               # [R, out]
    rank_row = 0
    for m in modules:
        r, first = m.a.shape[0], m.place.first_column
        b[rank_row:rank_row + r, first:first + m.place.out_features] = m.scaled_bt   # [r, out_i]
        rank_row += r
    return LowRank(a=a, b=b)
