"""Which decoder family a model file describes, its `FamilyOptions`, and what is refused.

The served families share one forward pass (engine/model/llama.py) and differ only in
options:

    llama   plain pre-norm decoder; Llama 3 RoPE scaling (config.json `rope_scaling`, or the
            GGUF `rope_freqs` tensor, read by weights.py); GGUF Q/K rows permuted
    qwen2   + q/k/v projection biases; GGUF rows not permuted (llama.cpp uses NEOX RoPE)
    qwen3   + per-head q/k RMSNorm before RoPE, explicit head_dim; GGUF rows not permuted
    gemma3  + q/k norms, norms after attention and MLP, embeddings x sqrt(d), GeGLU
            (gelu_tanh), `query_pre_attn_scalar`, sliding-window layers with their own
            RoPE base (GGUF: 5 local then 1 global, base 10,000; config.json: `layer_types`
            or `sliding_window_pattern`, `rope_local_base_freq`, and "linear" RoPE scaling
            of the global layers); GGUF rows not permuted.
            Gemma's RMSNorm multiplies by `1 + w`: llama.cpp stores `1 + w` in the GGUF,
            a config.json's safetensors store `w`, so a folder's norms get `hf_norm_offset`
            (1) added at load and both end with the same stored factor the decoder
            multiplies by. A `gemma3` config (Gemma3ForConditionalGeneration) is read
            through its `text_config`; a vision tower is refused (text only).

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
    hf_norm_offset: float = 0.0  # added to a folder's RMSNorm weights (Gemma stores w of 1 + w)


FAMILIES = {
    "llama": FamilyTraits(qkv_bias=False, qk_norm=False, gguf_qk_permuted=True),
    "qwen2": FamilyTraits(qkv_bias=True, qk_norm=False, gguf_qk_permuted=False),
    "qwen3": FamilyTraits(qkv_bias=False, qk_norm=True, gguf_qk_permuted=False),
    "gemma3": FamilyTraits(qkv_bias=False, qk_norm=True, gguf_qk_permuted=False,
                           hf_norm_offset=1.0),
}
# Gemma 3: layer i is global iff (i + 1) % GEMMA3_GLOBAL_EVERY == 0 (5 local : 1 global,
# llama.cpp's swa pattern, transformers' layer_types); local layers' RoPE base is
# transformers' gemma3 default (the GGUF stores only the global one).
GEMMA3_GLOBAL_EVERY = 6
GEMMA3_27B_LAYERS = 62        # the one Gemma 3 whose query_pre_attn_scalar is not head_dim
GEMMA3_LOCAL_ROPE_THETA = 10000.0
GEMMA3_ACTIVATION = "gelu_tanh"
HF_ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                    "Qwen3ForCausalLM": "qwen3", "Gemma3ForCausalLM": "gemma3",
                    "Gemma3ForConditionalGeneration": "gemma3"}
# config.json model_type -> family, for the names that are not a family's own.
HF_MODEL_TYPES = {"gemma3_text": "gemma3"}
GEMMA3_MULTIMODAL_TYPE = "gemma3"       # Gemma3ForConditionalGeneration: text in text_config
# transformers' Gemma3TextConfig defaults: a text_config inside a `gemma3` config.json holds
# only the values that differ from them (save_pretrained writes sub-configs as a diff).
GEMMA3_HF_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131_072, "rms_norm_eps": 1e-6, "eos_token_id": 1,
    "bos_token_id": 2, "tie_word_embeddings": True, "rope_theta": 1_000_000.0,
    "query_pre_attn_scalar": 256, "sliding_window": 4096, "rope_local_base_freq": 10_000.0,
    "sliding_window_pattern": GEMMA3_GLOBAL_EVERY,
}
GEMMA3_HF_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_tanh")   # both GELU's tanh approximation
SLIDING_ATTENTION = "sliding_attention"
ROPE_TYPE_LINEAR = "linear"             # Gemma 3 4B+: global layers' frequencies / factor
GEMMA3_LINEAR_FACTOR_KEY = "_global_rope_linear_factor"   # set by _gemma3_rope_bases
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


def hf_norm_offset(options: FamilyOptions) -> float:
    """What a folder's RMSNorm weights need added to be the factor the decoder multiplies by."""
    return FAMILIES[options.family].hf_norm_offset


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
    model_type = HF_MODEL_TYPES.get(model_type, model_type)
    if model_type not in FAMILIES:
        _refuse(path, "model_type", f"architecture {model_type!r} is not served "
                                    f"(served: {', '.join(FAMILIES)})")
    return model_type


def hf_text_config(cfg: dict, path: str) -> dict:
    """config.json -> the flat dict of the decoder's keys. Gemma 3: a multimodal config's
    `text_config` (no vision tower), its defaults filled in, RoPE bases flattened."""
    if cfg.get("model_type") == GEMMA3_MULTIMODAL_TYPE:
        if cfg.get("vision_config") is not None:
            _refuse(path, "vision_config", "a vision tower (only Gemma 3's text model is "
                                           "served)")
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise ModelFormatError(path, "a gemma3 config.json without a text_config")
        outer = {k: cfg[k] for k in ("bos_token_id", "eos_token_id") if k in cfg}
        cfg = {**text, **outer, "model_type": "gemma3_text"}
    if family_from_hf(cfg, path) != "gemma3":
        return cfg
    flat = {**GEMMA3_HF_DEFAULTS, **{k: v for k, v in cfg.items() if v is not None}}
    return _gemma3_rope_bases(flat, path)


def _gemma3_rope_bases(cfg: dict, path: str) -> dict:
    """Gemma 3's RoPE: transformers 5's `rope_parameters` per layer type, or 4's
    `rope_theta` / `rope_local_base_freq` / `rope_scaling`, -> the two bases and the global
    layers' linear factor (`GEMMA3_LINEAR_FACTOR_KEY`; Gemma 3 4B+: 8); other types refused."""
    params = cfg.pop("rope_parameters", None) or {}
    per_type = params if any(isinstance(v, dict) for v in params.values()) else \
        ({FULL_ATTENTION: params} if params else {})
    for layer_type, base_key in ((FULL_ATTENTION, "rope_theta"),
                                 (SLIDING_ATTENTION, "rope_local_base_freq")):
        one = per_type.get(layer_type) or {}
        partial = one.get("partial_rotary_factor", cfg.get("partial_rotary_factor"))
        if partial not in (None, 1, 1.0):
            _refuse(path, "partial_rotary_factor", f"partial rotary ({partial!r})")
        linear_ok = layer_type == FULL_ATTENTION
        _gemma3_scaling(cfg, one, f"rope_parameters.{layer_type}", linear_ok, path)
        if one.get("rope_theta") is not None:
            cfg[base_key] = one["rope_theta"]
    _gemma3_scaling(cfg, cfg.pop("rope_scaling", None) or {}, "rope_scaling", True, path)
    return cfg


def _gemma3_scaling(cfg: dict, params: dict, key: str, linear_ok: bool, path: str) -> None:
    """Plain RoPE, or (global layers) transformers' "linear" with its factor; else refuse."""
    rope_type = params.get("rope_type", params.get("type"))
    if rope_type in ROPE_TYPES_PLAIN:
        return
    if rope_type != ROPE_TYPE_LINEAR or not linear_ok:
        _refuse(path, f"{key}.rope_type", f"RoPE scaling type {rope_type!r}")
    try:
        cfg[GEMMA3_LINEAR_FACTOR_KEY] = float(params["factor"])
    except (KeyError, TypeError, ValueError):
        raise ModelFormatError(path, f"{key}: linear RoPE scaling without a factor") from None


def options_from_hf(cfg: dict, path: str) -> FamilyOptions:
    """A flat config (`hf_text_config`) -> FamilyOptions, refusing every key that changes
    unimplemented maths."""
    family = family_from_hf(cfg, path)
    if family == "gemma3":
        return _gemma3_hf_options(cfg, path)
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


def _gemma3_hf_options(cfg: dict, path: str) -> FamilyOptions:
    """Gemma 3's options from its (flat, defaulted) config.json keys."""
    for key in HF_REFUSED_KEYS + ("use_bidirectional_attention",):
        if cfg.get(key):
            _refuse(path, key, f"set to {cfg[key]!r}")
    if cfg.get("attention_bias"):
        _refuse(path, "attention_bias", "q/k/v/o biases are not read for this family")
    act = cfg["hidden_activation"]
    if act not in GEMMA3_HF_ACTIVATIONS:
        _refuse(path, "hidden_activation", f"activation {act!r} (only gelu_pytorch_tanh)")
    try:
        num_layers, hidden = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
        window, head_dim = int(cfg["sliding_window"]), int(cfg["head_dim"])
        scalar = float(cfg["query_pre_attn_scalar"])    # scores x scalar**-0.5
        sliding = _gemma3_sliding_layers(cfg, num_layers, path)
        return dataclasses.replace(
            _options("gemma3", None), post_norms=True, embed_scale=math.sqrt(hidden),
            mlp_activation=GEMMA3_ACTIVATION,
            attn_scale=None if scalar == head_dim else scalar ** -0.5,   # None: hd**-0.5
            sliding_window=window if any(sliding) else None,
            sliding_layers=sliding if any(sliding) else (),
            local_rope_theta=float(cfg["rope_local_base_freq"]),
            global_rope_linear_factor=cfg.get(GEMMA3_LINEAR_FACTOR_KEY))
    except ModelFormatError:
        raise                       # already names the key (a ValueError too)
    except (TypeError, ValueError) as e:
        raise ModelFormatError(path, f"bad gemma3 config value: {e}") from None


def _gemma3_sliding_layers(cfg: dict, num_layers: int, path: str) -> tuple[bool, ...]:
    """Which layers slide: `layer_types`, else every `sliding_window_pattern`-th is global."""
    types = cfg.get("layer_types")
    if types is None:
        every = int(cfg["sliding_window_pattern"])
        return tuple((i + 1) % every != 0 for i in range(num_layers))
    unknown = sorted({t for t in types if t not in (FULL_ATTENTION, SLIDING_ATTENTION)})
    if unknown:
        _refuse(path, "layer_types", f"layer types {unknown}")
    if len(types) != num_layers:
        raise ModelFormatError(path, f"layer_types has {len(types)} entries for "
                                     f"{num_layers} layers")
    return tuple(t == SLIDING_ATTENTION for t in types)


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
        heads = int(meta["gemma3.attention.head_count"])
    except (KeyError, TypeError, ValueError) as e:
        raise ModelFormatError(path, f"gemma3 metadata: {e!r}") from None
    sliding = tuple((i + 1) % GEMMA3_GLOBAL_EVERY != 0 for i in range(num_layers))
    # The GGUF stores no query_pre_attn_scalar: it equals head_dim in every Gemma 3 but the
    # 27B (62 layers), whose scalar is hidden / heads = 168 against head_dim 128; llama.cpp
    # knows the 27B by its layer count, and so do we.
    scale = (hidden / heads) ** -0.5 if num_layers == GEMMA3_27B_LAYERS else None
    return dataclasses.replace(
        options, post_norms=True, embed_scale=math.sqrt(hidden), attn_scale=scale,
        mlp_activation=GEMMA3_ACTIVATION,
        sliding_window=window or None, sliding_layers=sliding if window else (),
        local_rope_theta=GEMMA3_LOCAL_ROPE_THETA)


def gguf_qk_permuted(options: FamilyOptions) -> bool:
    """Whether this family's GGUF stores Q/K rows in ggml's adjacent-pair order."""
    return FAMILIES[options.family].gguf_qk_permuted
