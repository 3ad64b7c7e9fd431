"""Which decoder family a model file describes, its `FamilyOptions`, and what is refused.

The served families share one forward pass (engine/model/llama.py) and differ only in
options:

    llama   plain pre-norm decoder; Llama 3 RoPE scaling (config.json `rope_scaling`, or the
            GGUF `rope_freqs` tensor, read by weights.py); GGUF Q/K rows permuted
    qwen2   + q/k/v projection biases; GGUF rows not permuted (llama.cpp uses NEOX RoPE)
    qwen3   + per-head q/k RMSNorm before RoPE, explicit head_dim; GGUF rows not permuted
    gemma3  (GGUF only) + q/k norms, norms after attention and MLP, embeddings x sqrt(d),
            GeGLU (gelu_tanh), 5 sliding-window layers (RoPE base 10,000) then 1 global
            (the file's base), repeated; GGUF rows not permuted. llama.cpp stores Gemma's
            RMSNorm factor `1 + w` in the file, so every norm multiplies by the stored value
            as the other families do; a config.json stores `w` and is refused for now.

"Never load and answer wrongly": a config key or GGUF key that would change the maths and
is not implemented here (another RoPE scaling type, partial rotary, logit soft-capping,
sliding windows, biases we do not read, another activation, experts) refuses the model with
`UnsupportedModel` (a ModelFormatError) naming the key and the file. Unknown tensors are
refused by weights.py.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from engine.errors import ModelFormatError, UnsupportedModel
from engine.model.spec import FamilyOptions, Llama3RopeScaling


@dataclass(frozen=True)
class FamilyTraits:
    """What a family adds to the plain decoder, and how its GGUF stores Q/K rows."""
    qkv_bias: bool
    qk_norm: bool
    gguf_qk_permuted: bool       # llama.cpp's converter permutes Q/K rows (adjacent-pair RoPE)


FAMILIES = {
    "llama": FamilyTraits(qkv_bias=False, qk_norm=False, gguf_qk_permuted=True),
    "qwen2": FamilyTraits(qkv_bias=True, qk_norm=False, gguf_qk_permuted=False),
    "qwen3": FamilyTraits(qkv_bias=False, qk_norm=True, gguf_qk_permuted=False),
    "gemma3": FamilyTraits(qkv_bias=False, qk_norm=True, gguf_qk_permuted=False),
}
# Families whose config.json form is not read (its norm weights are w, the GGUF's 1 + w).
GGUF_ONLY_FAMILIES = ("gemma3",)
# Gemma 3: layer i is global iff (i + 1) % GEMMA3_GLOBAL_EVERY == 0 (5 local : 1 global,
# llama.cpp's swa pattern, transformers' layer_types); local layers' RoPE base is
# transformers' gemma3 default (the GGUF stores only the global one).
GEMMA3_GLOBAL_EVERY = 6
GEMMA3_LOCAL_ROPE_THETA = 10000.0
GEMMA3_ACTIVATION = "gelu_tanh"
HF_ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                    "Qwen3ForCausalLM": "qwen3"}
ROPE_TYPES_PLAIN = (None, "default")
ROPE_TYPE_LLAMA3 = "llama3"
LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings")
SUPPORTED_ACTIVATION = "silu"
FULL_ATTENTION = "full_attention"
# config.json keys whose presence with a true / non-null value changes the maths we do not do.
HF_REFUSED_KEYS = ("attn_logit_softcapping", "final_logit_softcapping", "use_sliding_window",
                   "mlp_bias", "num_experts", "num_local_experts")
# GGUF `{arch}.` keys that change the maths -> the values that leave it unchanged.
GGUF_REFUSED_KEYS = {
    "attn_logit_softcapping": (None, 0.0), "final_logit_softcapping": (None, 0.0),
    "expert_count": (None, 0),
    "rope.scaling.type": (None, "none"), "rope.scaling.factor": (None, 0.0, 1.0),
}


def _refuse(path: str, key: str, why: str):
    raise UnsupportedModel(path, f"{key}: {why} (not supported, refusing rather than "
                                 f"answering wrongly)")


def _options(family: str, rope_scaling: Llama3RopeScaling | None) -> FamilyOptions:
    traits = FAMILIES[family]
    return FamilyOptions(family=family, qkv_bias=traits.qkv_bias, qk_norm=traits.qk_norm,
                         rope_scaling=rope_scaling)


# --- Hugging Face config.json ----------------------------------------------------------

def family_from_hf(cfg: dict, path: str) -> str:
    """model_type (or, without it, the architectures list) -> a served family."""
    model_type = cfg.get("model_type")
    if model_type is None:
        archs = cfg.get("architectures") or ["LlamaForCausalLM"]   # bare test configs
        unknown = [a for a in archs if a not in HF_ARCHITECTURES]
        if unknown:
            _refuse(path, "architectures", f"architecture {unknown[0]!r} is not served "
                                           f"(served: {', '.join(HF_ARCHITECTURES)})")
        return HF_ARCHITECTURES[archs[0]]
    if model_type in GGUF_ONLY_FAMILIES:
        _refuse(path, "model_type", f"{model_type!r} from config.json (only its GGUF is "
                                    f"served: the GGUF stores the norms' 1 + w)")
    if model_type not in FAMILIES:
        _refuse(path, "model_type", f"architecture {model_type!r} is not served "
                                    f"(served: {', '.join(FAMILIES)})")
    return model_type


def options_from_hf(cfg: dict, path: str) -> FamilyOptions:
    """config.json -> FamilyOptions, refusing every key that changes unimplemented maths."""
    family = family_from_hf(cfg, path)
    for key in HF_REFUSED_KEYS:
        if cfg.get(key):
            _refuse(path, key, f"set to {cfg[key]!r}")
    if cfg.get("attention_bias") and not FAMILIES[family].qkv_bias:
        _refuse(path, "attention_bias", "q/k/v/o biases are not read for this family")
    if family == "llama" and cfg.get("sliding_window") is not None:
        _refuse(path, "sliding_window", "sliding-window attention")
    other_layers = sorted({t for t in cfg.get("layer_types") or () if t != FULL_ATTENTION})
    if other_layers:
        _refuse(path, "layer_types", f"layer types {other_layers}")
    act = cfg.get("hidden_act", SUPPORTED_ACTIVATION)
    if act != SUPPORTED_ACTIVATION:
        _refuse(path, "hidden_act", f"activation {act!r} (only {SUPPORTED_ACTIVATION})")
    return _options(family, _hf_rope_scaling(cfg, path))


def _hf_rope_scaling(cfg: dict, path: str) -> Llama3RopeScaling | None:
    """`rope_scaling` (transformers 4) or `rope_parameters` (5): plain or llama3 only."""
    scaling = None
    for key in ("rope_scaling", "rope_parameters"):
        params = cfg.get(key) or {}
        if any(isinstance(value, dict) for value in params.values()):
            _refuse(path, key, "RoPE parameters per layer type")      # Gemma 3 style
        partial = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor"))
        if partial not in (None, 1, 1.0):
            _refuse(path, "partial_rotary_factor", f"partial rotary ({partial!r})")
        rope_type = params.get("rope_type", params.get("type"))
        if rope_type in ROPE_TYPES_PLAIN:
            continue
        if rope_type != ROPE_TYPE_LLAMA3:
            _refuse(path, f"{key}.rope_type", f"RoPE scaling type {rope_type!r}")
        missing = [k for k in LLAMA3_KEYS if k not in params]
        if missing:
            raise ModelFormatError(path, f"{key}: llama3 RoPE scaling without {missing}")
        scaling = Llama3RopeScaling(
            factor=float(params["factor"]), low_freq_factor=float(params["low_freq_factor"]),
            high_freq_factor=float(params["high_freq_factor"]),
            original_max_positions=int(params["original_max_position_embeddings"]))
    return scaling


# --- GGUF metadata -----------------------------------------------------------------------

def options_from_gguf(meta: dict, path: str) -> FamilyOptions:
    """`general.architecture` and `{arch}.*` keys -> FamilyOptions (no rope_freqs yet:
    that is a tensor, weights.py adds it), refusing keys that change unimplemented maths."""
    arch = meta.get("general.architecture")
    if arch not in FAMILIES:
        _refuse(path, "general.architecture", f"architecture {arch!r} is not served "
                                              f"(served: {', '.join(FAMILIES)})")
    for name, harmless in GGUF_REFUSED_KEYS.items():
        value = meta.get(f"{arch}.{name}")
        if value not in harmless:
            _refuse(path, f"{arch}.{name}", f"set to {value!r}")
    window = meta.get(f"{arch}.attention.sliding_window")
    if arch != "gemma3" and window not in (None, 0):
        _refuse(path, f"{arch}.attention.sliding_window", f"set to {window!r}")
    key_length = meta.get(f"{arch}.attention.key_length")
    value_length = meta.get(f"{arch}.attention.value_length", key_length)
    if key_length != value_length:
        _refuse(path, f"{arch}.attention.value_length",
                f"value heads of {value_length} dims, key heads of {key_length}")
    options = _options(arch, None)
    return _gemma3_gguf_options(meta, path, options) if arch == "gemma3" else options


def _gemma3_gguf_options(meta: dict, path: str, options: FamilyOptions) -> FamilyOptions:
    """Gemma 3's additions from its GGUF keys: the window, the layer pattern, sqrt(d)."""
    try:
        window = int(meta.get("gemma3.attention.sliding_window") or 0)
        num_layers = int(meta["gemma3.block_count"])
        hidden = int(meta["gemma3.embedding_length"])
    except (KeyError, TypeError, ValueError) as e:
        raise ModelFormatError(path, f"gemma3 metadata: {e!r}") from None
    sliding = tuple((i + 1) % GEMMA3_GLOBAL_EVERY != 0 for i in range(num_layers))
    return dataclasses.replace(
        options, post_norms=True, embed_scale=math.sqrt(hidden),
        mlp_activation=GEMMA3_ACTIVATION,
        sliding_window=window or None, sliding_layers=sliding if window else (),
        local_rope_theta=GEMMA3_LOCAL_ROPE_THETA)


def gguf_qk_permuted(options: FamilyOptions) -> bool:
    """Whether this family's GGUF stores Q/K rows in ggml's adjacent-pair order."""
    return FAMILIES[options.family].gguf_qk_permuted
