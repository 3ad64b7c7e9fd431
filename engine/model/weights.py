"""Tensors + hyper-parameters -> `ModelConfig` and `LlamaWeights` (engine/model/spec.py).

Both file formats name the same Llama tensors differently and store every projection
output-major (`[out, in]`, PyTorch's `nn.Linear` layout). This module maps the names
through one table per format, checks every shape against the config, and asks the format's
`TensorSource` for the matrices in the layout the forward pass wants (the GGUF source
transposes packed bytes, so no float32 copy is wasted):

* input-major (`x @ W`), float32, C-contiguous;
* Q, K and V fused column-wise into `wqkv [d, H*hd + 2*KV*hd]`, gate and up into
  `w_gate_up [d, 2*ff]`;
* Q/K rows in Hugging Face's rotate-half order. llama.cpp's converter permutes them so that
  ggml's adjacent-pair RoPE rotates (row 2j, row 2j+1) of each head; HF rotates (row j,
  row j + hd/2). For GGUF input the loader reads Q/K rows in `unpermute_order`;
  `permute_rows` is the converter's direction (used by the tests to write a GGUF).
* No `lm_head` tensor means tied embeddings: `lm_head = embed.T`, a view, not a copy.

Config keys come from `config.json` (`config_from_hf`) or the GGUF `llama.*` metadata
(`config_from_gguf`), with the family's options from engine/model/families.py (which refuses
what is not implemented). The family decides the optional tensors (Qwen2's q/k/v biases,
Qwen3's and Gemma's q/k norms, Gemma's post-norms, a Llama 3 GGUF's `rope_freqs` divisors); any missing key, missing tensor,
unknown tensor or wrong shape raises `ModelFormatError` naming the file. A Gemma 3 folder
has its own norm names (`hf_role_names`, also under a multimodal model's prefix) and stores
Gemma's RMSNorm factor as `w` of `1 + w`: its `TensorSource.norm_offset` adds the 1, so both
formats hand the decoder the `1 + w` llama.cpp stores.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.errors import ModelFormatError, UnsupportedModel
from engine.model.families import hf_text_config, options_from_gguf, options_from_hf
from engine.model.spec import LayerWeights, LlamaWeights, ModelConfig

DEFAULT_ROPE_THETA = 10000.0
DEFAULT_RMS_EPS_HF = 1e-6           # transformers' LlamaConfig default
DEFAULT_RMS_EPS_GGUF = 1e-5         # llama.cpp's default
DEFAULT_MAX_POSITIONS = 2048
# Tensors a checkpoint may carry that the maths never needs (old HF RoPE buffers).
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)

# Tensor roles -> names per format ({i} = layer index). Output-major in both.
HF_NAMES = {
    "embed": "model.embed_tokens.weight", "final_norm": "model.norm.weight",
    "lm_head": "lm_head.weight",
    "attn_norm": "model.layers.{i}.input_layernorm.weight",
    "q": "model.layers.{i}.self_attn.q_proj.weight",
    "k": "model.layers.{i}.self_attn.k_proj.weight",
    "v": "model.layers.{i}.self_attn.v_proj.weight",
    "o": "model.layers.{i}.self_attn.o_proj.weight",
    "mlp_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "gate": "model.layers.{i}.mlp.gate_proj.weight",
    "up": "model.layers.{i}.mlp.up_proj.weight",
    "down": "model.layers.{i}.mlp.down_proj.weight",
    "q_bias": "model.layers.{i}.self_attn.q_proj.bias",
    "k_bias": "model.layers.{i}.self_attn.k_proj.bias",
    "v_bias": "model.layers.{i}.self_attn.v_proj.bias",
    "q_norm": "model.layers.{i}.self_attn.q_norm.weight",
    "k_norm": "model.layers.{i}.self_attn.k_norm.weight",
}
# Gemma 3's folder names differ where its block differs: post_attention_layernorm is the norm
# AFTER attention (Llama's is the MLP's pre-norm), pre_feedforward_layernorm the MLP's.
HF_GEMMA3_NAMES = {
    **HF_NAMES,
    "mlp_norm": "model.layers.{i}.pre_feedforward_layernorm.weight",
    "post_attn_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "post_mlp_norm": "model.layers.{i}.post_feedforward_layernorm.weight",
}
# Where a folder's decoder sits: Gemma3ForCausalLM ("model."), Gemma3ForConditionalGeneration
# saved by transformers >= 4.52 ("model.language_model.") or before ("language_model.model.",
# its LM head "language_model.lm_head.").
HF_BODY_PREFIXES = ("model.", "model.language_model.", "language_model.model.")
HF_HEAD_PREFIXES = ("", "language_model.")
GGUF_NAMES = {
    "embed": "token_embd.weight", "final_norm": "output_norm.weight",
    "lm_head": "output.weight",
    "attn_norm": "blk.{i}.attn_norm.weight",
    "q": "blk.{i}.attn_q.weight", "k": "blk.{i}.attn_k.weight", "v": "blk.{i}.attn_v.weight",
    "o": "blk.{i}.attn_output.weight",
    "mlp_norm": "blk.{i}.ffn_norm.weight",
    "gate": "blk.{i}.ffn_gate.weight", "up": "blk.{i}.ffn_up.weight",
    "down": "blk.{i}.ffn_down.weight",
    "q_bias": "blk.{i}.attn_q.bias", "k_bias": "blk.{i}.attn_k.bias",
    "v_bias": "blk.{i}.attn_v.bias",
    "q_norm": "blk.{i}.attn_q_norm.weight", "k_norm": "blk.{i}.attn_k_norm.weight",
    "rope_freqs": "rope_freqs.weight",
    "post_attn_norm": "blk.{i}.post_attention_norm.weight",     # Gemma 3
    "post_mlp_norm": "blk.{i}.post_ffw_norm.weight",            # Gemma 3
}
LAYER_ROLES = ("attn_norm", "q", "k", "v", "o", "mlp_norm", "gate", "up", "down")
BIAS_ROLES = ("q_bias", "k_bias", "v_bias")
QK_NORM_ROLES = ("q_norm", "k_norm")
POST_NORM_ROLES = ("post_attn_norm", "post_mlp_norm")      # Gemma 3
NORM_ROLES = ("attn_norm", "mlp_norm", "final_norm") + QK_NORM_ROLES + POST_NORM_ROLES


@dataclass(frozen=True)
class TensorSource:
    """Where tensors come from, as the builder needs them (one per file format)."""
    path: str
    shapes: dict[str, tuple[int, ...]]          # every tensor's stored shape (numpy order)
    get: Callable[[str], np.ndarray]            # name -> float32 array as stored
    get_input_major: Callable[[list[tuple[str, np.ndarray | None]]], np.ndarray]
    #   [(name of an [out_i, in] matrix, output-row order or None), ...]
    #   -> float32 [in, sum(out_i)]: the matrices transposed and fused column-wise
    role_names: dict[str, str]
    is_gguf_permuted: bool          # Q/K rows in ggml's adjacent-pair order
    norm_offset: float = 0.0        # added to every RMSNorm weight read (a Gemma folder: 1)


# --- configs ---------------------------------------------------------------------------

def _require(src: dict, key: str, path: str):
    if key not in src:
        raise ModelFormatError(path, f"missing config key {key}")
    return src[key]


def as_ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),)


def hf_role_names(family: str, shapes: dict) -> dict[str, str]:
    """The tensor names of a folder of `family`, under the prefix its embedding is found at."""
    names = HF_GEMMA3_NAMES if family == "gemma3" else HF_NAMES
    body = next((p for p in HF_BODY_PREFIXES if f"{p}embed_tokens.weight" in shapes), "model.")
    head = next((p for p in HF_HEAD_PREFIXES if f"{p}lm_head.weight" in shapes), "")
    return {role: (head + name if role == "lm_head" else body + name.removeprefix("model."))
            for role, name in names.items()}


def config_from_hf(cfg: dict, path: str) -> ModelConfig:
    """config.json (Llama/Qwen2/Qwen3/Gemma 3) -> ModelConfig. rope_theta may sit in
    rope_parameters; a Gemma 3 multimodal config is read through its text_config."""
    cfg = hf_text_config(cfg, path)
    options = options_from_hf(cfg, path)
    try:
        heads = int(_require(cfg, "num_attention_heads", path))
        hidden = int(_require(cfg, "hidden_size", path))
        rope = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta")
        return ModelConfig(
            vocab_size=int(_require(cfg, "vocab_size", path)),
            hidden_size=hidden,
            intermediate_size=int(_require(cfg, "intermediate_size", path)),
            num_layers=int(_require(cfg, "num_hidden_layers", path)),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            rope_theta=float(rope or DEFAULT_ROPE_THETA),
            rms_norm_eps=float(cfg.get("rms_norm_eps", DEFAULT_RMS_EPS_HF)),
            max_position_embeddings=int(cfg.get("max_position_embeddings",
                                                DEFAULT_MAX_POSITIONS)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            bos_token_id=None if cfg.get("bos_token_id") is None else int(cfg["bos_token_id"]),
            eos_token_ids=as_ids(cfg.get("eos_token_id")),
            options=options,
        )
    except (TypeError, ValueError, AttributeError) as e:
        raise ModelFormatError(path, f"bad config value: {e}") from None


def config_from_gguf(meta: dict, path: str, vocab_fallback: int) -> ModelConfig:
    """GGUF `{arch}.*` and `tokenizer.ggml.*` metadata -> ModelConfig."""
    options = options_from_gguf(meta, path)
    arch = options.family

    def key(name: str, default=None):
        full = f"{arch}.{name}"
        return meta[full] if full in meta or default is None else default

    try:
        hidden = int(_require(meta, f"{arch}.embedding_length", path))
        heads = int(_require(meta, f"{arch}.attention.head_count", path))
        head_dim = int(key("attention.key_length", hidden // heads))
        rope_dims = int(key("rope.dimension_count", head_dim))
        if rope_dims != head_dim:
            raise UnsupportedModel(path, f"{arch}.rope.dimension_count: partial RoPE "
                                         f"({rope_dims} of {head_dim} dims) is not supported")
        tokens = meta.get("tokenizer.ggml.tokens")
        return ModelConfig(
            vocab_size=int(key("vocab_size", len(tokens) if tokens else vocab_fallback)),
            hidden_size=hidden,
            intermediate_size=int(_require(meta, f"{arch}.feed_forward_length", path)),
            num_layers=int(_require(meta, f"{arch}.block_count", path)),
            num_heads=heads,
            num_kv_heads=int(key("attention.head_count_kv", heads)),
            head_dim=head_dim,
            rope_theta=float(key("rope.freq_base", DEFAULT_ROPE_THETA)),
            rms_norm_eps=float(key("attention.layer_norm_rms_epsilon", DEFAULT_RMS_EPS_GGUF)),
            max_position_embeddings=int(key("context_length", DEFAULT_MAX_POSITIONS)),
            tie_word_embeddings=False,  # build_weights ties when output.weight is absent
            bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=as_ids(meta.get("tokenizer.ggml.eos_token_id")),
            options=options,
        )
    except ModelFormatError:
        raise                       # already names the file and the key (a ValueError too)
    except (TypeError, ValueError) as e:
        raise ModelFormatError(path, f"bad metadata value: {e}") from None


# --- Q/K row order ---------------------------------------------------------------------

def permute_rows(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Rotate-half rows -> ggml adjacent-pair rows (llama.cpp's converter direction).

    Per head, rows [a0..a(h-1), b0..b(h-1)] (h = hd/2) become [a0, b0, a1, b1, ...].
    """
    out_dim = w.shape[0]
    half = out_dim // num_heads // 2
    return w.reshape(num_heads, 2, half, -1).swapaxes(1, 2).reshape(w.shape)   # same shape


def unpermute_order(out_dim: int, num_heads: int) -> np.ndarray:
    """Row indices that undo `permute_rows`: rotate-half row r is stored row order[r]."""
    half = out_dim // num_heads // 2
    return np.arange(out_dim).reshape(num_heads, half, 2).swapaxes(1, 2).reshape(-1)


# --- weights ---------------------------------------------------------------------------

def _name(src: TensorSource, role: str, shape: tuple[int, ...], layer: int = 0) -> str:
    """The tensor's name, after checking that it exists with the shape the config implies."""
    name = src.role_names[role].format(i=layer)
    if name not in src.shapes:
        raise ModelFormatError(src.path, f"missing tensor {name}")
    if tuple(src.shapes[name]) != shape:
        raise ModelFormatError(src.path, f"tensor {name} has shape {list(src.shapes[name])}, "
                                         f"expected {list(shape)} from the config")
    return name


def _owned_f32(array: np.ndarray) -> np.ndarray:
    """The array itself if it is a writeable C-contiguous float32 one, else such a copy."""
    if array.flags.writeable and array.flags.c_contiguous and array.dtype == np.float32:
        return array
    return np.array(array, dtype=np.float32, order="C")     # never borrow the mapped file


def _vector(src: TensorSource, role: str, size: int, layer: int = 0) -> np.ndarray:
    vector = _owned_f32(src.get(_name(src, role, (size,), layer)))          # [size]
    if src.norm_offset and role in NORM_ROLES:      # float32 1 + w, as Gemma3RMSNorm computes
        vector = (vector + np.float32(src.norm_offset)).astype(np.float32)
    return vector


def _input_major(src: TensorSource, roles: list[tuple[str, tuple, int]],
                 layer: int = 0) -> np.ndarray:
    """Stored [out_i, in] matrices -> one float32 [in, sum(out_i)], fused column-wise.

    `roles`: (role, stored shape, RoPE heads or 0); Q and K (heads > 0) come back in
    rotate-half row order.
    """
    parts = []
    for role, shape, rope_heads in roles:
        name = _name(src, role, shape, layer)
        permuted = rope_heads and src.is_gguf_permuted
        parts.append((name, unpermute_order(shape[0], rope_heads) if permuted else None))
    return src.get_input_major(parts)


def _qkv_bias(src: TensorSource, cfg: ModelConfig, i: int) -> np.ndarray:
    """q | k | v biases [H*hd + 2*KV*hd], q and k in rotate-half order like their rows."""
    parts = []
    for role, heads in (("q_bias", cfg.num_heads), ("k_bias", cfg.num_kv_heads), ("v_bias", 0)):
        size = cfg.q_size if role == "q_bias" else cfg.kv_size
        bias = _vector(src, role, size, i)                                  # [size]
        parts.append(bias[unpermute_order(size, heads)] if heads and src.is_gguf_permuted
                     else bias)
    return np.concatenate(parts)


def _layer(src: TensorSource, cfg: ModelConfig, i: int) -> LayerWeights:
    d, ff, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.q_size, cfg.kv_size
    qkv = [("q", (q, d), cfg.num_heads), ("k", (kv, d), cfg.num_kv_heads), ("v", (kv, d), 0)]
    qk_norm, post_norms = cfg.options.qk_norm, cfg.options.post_norms
    return LayerWeights(
        attn_norm=_vector(src, "attn_norm", d, i),
        wqkv=_input_major(src, qkv, i),                                     # [d, q + 2*kv]
        wo=_input_major(src, [("o", (d, q), 0)], i),                        # [q, d]
        mlp_norm=_vector(src, "mlp_norm", d, i),
        w_gate_up=_input_major(src, [("gate", (ff, d), 0), ("up", (ff, d), 0)], i),
        w_down=_input_major(src, [("down", (d, ff), 0)], i),               # [ff, d]
        bqkv=_qkv_bias(src, cfg, i) if cfg.options.qkv_bias else None,      # [q + 2*kv]
        q_norm=_vector(src, "q_norm", cfg.head_dim, i) if qk_norm else None,  # [hd]
        k_norm=_vector(src, "k_norm", cfg.head_dim, i) if qk_norm else None,  # [hd]
        post_attn_norm=_vector(src, "post_attn_norm", d, i) if post_norms else None,  # [d]
        post_mlp_norm=_vector(src, "post_mlp_norm", d, i) if post_norms else None,    # [d]
    )


def _check_heads(cfg: ModelConfig, path: str) -> None:
    if cfg.num_kv_heads <= 0 or cfg.num_heads % cfg.num_kv_heads:
        raise ModelFormatError(path, f"{cfg.num_heads} heads are not a multiple of "
                                     f"{cfg.num_kv_heads} KV heads")
    if cfg.num_layers and cfg.head_dim % 2:
        raise ModelFormatError(path, f"head_dim {cfg.head_dim} is odd (RoPE rotates pairs)")


def build_weights(src: TensorSource, cfg: ModelConfig) -> tuple[ModelConfig, LlamaWeights]:
    """Load, check and rearrange every tensor; returns the config with tying and the GGUF's
    RoPE divisors settled."""
    _check_heads(cfg, src.path)
    _check_known_tensors(src, cfg)
    cfg = _with_rope_divisors(src, cfg)
    d, vocab = cfg.hidden_size, cfg.vocab_size
    embed = _owned_f32(src.get(_name(src, "embed", (vocab, d))))            # [V, d]
    has_head = src.role_names["lm_head"] in src.shapes
    tied = cfg.tie_word_embeddings or not has_head              # no LM head tensor: tied
    if tied:
        lm_head = embed.T                                        # [d, V], a view
    else:
        lm_head = _input_major(src, [("lm_head", (vocab, d), 0)])          # [d, V]
    weights = LlamaWeights(
        embed=embed,
        layers=tuple(_layer(src, cfg, i) for i in range(cfg.num_layers)),
        final_norm=_vector(src, "final_norm", d),
        lm_head=lm_head,
    )
    return dataclasses.replace(cfg, tie_word_embeddings=tied), weights


def _expected_names(src: TensorSource, cfg: ModelConfig) -> set[str]:
    """Every tensor name this family's decoder reads (or may find and leave, like a tied
    model's spare LM head)."""
    roles = list(LAYER_ROLES)
    roles += BIAS_ROLES if cfg.options.qkv_bias else ()
    roles += QK_NORM_ROLES if cfg.options.qk_norm else ()
    roles += POST_NORM_ROLES if cfg.options.post_norms else ()
    names = {src.role_names[r].format(i=i) for r in roles for i in range(cfg.num_layers)}
    names |= {src.role_names[r] for r in ("embed", "final_norm", "lm_head", "rope_freqs")
              if r in src.role_names}
    return names


def _check_known_tensors(src: TensorSource, cfg: ModelConfig) -> None:
    """Refuse a tensor the decoder would not read: it is maths we would silently skip."""
    expected = _expected_names(src, cfg)
    unknown = sorted(n for n in src.shapes
                     if n not in expected and not n.endswith(IGNORED_SUFFIXES))
    if unknown:
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        raise UnsupportedModel(src.path, f"unknown tensor {unknown[0]}{more} for the "
                                         f"{cfg.options.family} family (not supported)")


def _with_rope_divisors(src: TensorSource, cfg: ModelConfig) -> ModelConfig:
    """A GGUF's `rope_freqs` [hd/2] (llama.cpp's form of Llama 3 RoPE scaling) -> options."""
    name = src.role_names.get("rope_freqs")
    if name is None or name not in src.shapes:
        return cfg
    divisors = _vector(src, "rope_freqs", cfg.head_dim // 2)                # [hd/2]
    options = dataclasses.replace(cfg.options,
                                  rope_freq_divisors=tuple(float(x) for x in divisors))
    return dataclasses.replace(cfg, options=options)
