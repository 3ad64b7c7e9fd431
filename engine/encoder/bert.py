"""BERT's encoder in numpy float32: a padded batch of token ids -> last hidden states.

    x = LayerNorm(word[ids] + position[0..T) + token_type[0])           [B, T, H]
    per layer (post-LayerNorm):
        x = LayerNorm(x + attention(x, key_mask) @ Wo + bo)
        x = LayerNorm(x + gelu_erf(x @ Wi + bi) @ Wf + bf)

Attention is bidirectional: every real token sees every real token of its own row; the
padding positions are masked out as keys (-inf before the softmax), and their own outputs
are garbage nobody reads (pooling looks at real tokens only). No KV cache: an encoder runs
each input once. Matrices are stored input-major ([in, out], transposed once at load) and
q, k, v are fused into one [H, 3H] product.

Weights come from a transformers `BertModel` safetensors file (names with or without the
`bert.` prefix of the task heads' checkpoints); the pooler and any head are not read.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.encoder.erf import gelu_erf_
from engine.encoder.spec import BertConfig
from engine.errors import ModelFormatError
from engine.formats.safetensors import SafetensorsFile

INTEGER_DTYPES = frozenset({"I64", "I32"})    # buffers such as position_ids, not weights
NAME_PREFIXES = ("", "bert.")


@dataclass(frozen=True)
class BertLayer:
    qkv_w: np.ndarray        # [H, 3H]  (q | k | v columns)
    qkv_b: np.ndarray        # [3H]
    attn_out_w: np.ndarray   # [H, H]
    attn_out_b: np.ndarray   # [H]
    attn_norm_w: np.ndarray  # [H]
    attn_norm_b: np.ndarray  # [H]
    ffn_in_w: np.ndarray     # [H, I]
    ffn_in_b: np.ndarray     # [I]
    ffn_out_w: np.ndarray    # [I, H]
    ffn_out_b: np.ndarray    # [H]
    ffn_norm_w: np.ndarray   # [H]
    ffn_norm_b: np.ndarray   # [H]


@dataclass(frozen=True)
class BertWeights:
    word: np.ndarray         # [V, H]
    position: np.ndarray     # [P, H]
    token_type: np.ndarray   # [types, H]
    embed_norm_w: np.ndarray  # [H]
    embed_norm_b: np.ndarray  # [H]
    layers: tuple[BertLayer, ...]


def load_bert_weights(directory: Path, config: BertConfig) -> BertWeights:
    """The folder's model.safetensors -> float32 weights, shapes checked against config."""
    path = directory / "model.safetensors"
    if not path.is_file():
        raise ModelFormatError(path, "missing (the encoder reads model.safetensors)")
    tensors = _TensorReader(SafetensorsFile(path, skip_dtypes=INTEGER_DTYPES))
    H, I = config.hidden_size, config.intermediate_size
    layers = tuple(_layer(tensors, f"encoder.layer.{i}.", H, I) for i in range(config.num_layers))
    return BertWeights(
        word=tensors.get("embeddings.word_embeddings.weight", (config.vocab_size, H)),
        position=tensors.get("embeddings.position_embeddings.weight",
                             (config.max_position_embeddings, H)),
        token_type=tensors.get("embeddings.token_type_embeddings.weight",
                               (config.type_vocab_size, H)),
        embed_norm_w=tensors.get("embeddings.LayerNorm.weight", (H,)),
        embed_norm_b=tensors.get("embeddings.LayerNorm.bias", (H,)),
        layers=layers)


class _TensorReader:
    """Tensors by BertModel name, found with or without a `bert.` prefix, shape-checked."""

    def __init__(self, file: SafetensorsFile):
        self.file = file
        self.prefix = next((p for p in NAME_PREFIXES
                            if f"{p}embeddings.word_embeddings.weight" in file.header), "")

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        full = self.prefix + name
        if full not in self.file.header:
            raise ModelFormatError(self.file.path, f"missing tensor {full}")
        tensor = self.file.tensor(full)
        if tensor.shape != shape:
            raise ModelFormatError(self.file.path, f"tensor {full}: shape {list(tensor.shape)}, "
                                                   f"config.json implies {list(shape)}")
        return np.ascontiguousarray(tensor, dtype=np.float32)

    def linear(self, name: str, n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray]:
        """A torch Linear ([out, in] weight) as input-major [in, out] + bias [out]."""
        weight = self.get(name + ".weight", (n_out, n_in))
        return np.ascontiguousarray(weight.T), self.get(name + ".bias", (n_out,))


def _layer(t: _TensorReader, prefix: str, H: int, I: int) -> BertLayer:
    q_w, q_b = t.linear(prefix + "attention.self.query", H, H)
    k_w, k_b = t.linear(prefix + "attention.self.key", H, H)
    v_w, v_b = t.linear(prefix + "attention.self.value", H, H)
    o_w, o_b = t.linear(prefix + "attention.output.dense", H, H)
    i_w, i_b = t.linear(prefix + "intermediate.dense", I, H)
    f_w, f_b = t.linear(prefix + "output.dense", H, I)
    return BertLayer(
        qkv_w=np.ascontiguousarray(np.concatenate([q_w, k_w, v_w], axis=1)),
        qkv_b=np.concatenate([q_b, k_b, v_b]),
        attn_out_w=o_w, attn_out_b=o_b,
        attn_norm_w=t.get(prefix + "attention.output.LayerNorm.weight", (H,)),
        attn_norm_b=t.get(prefix + "attention.output.LayerNorm.bias", (H,)),
        ffn_in_w=i_w, ffn_in_b=i_b, ffn_out_w=f_w, ffn_out_b=f_b,
        ffn_norm_w=t.get(prefix + "output.LayerNorm.weight", (H,)),
        ffn_norm_b=t.get(prefix + "output.LayerNorm.bias", (H,)))


# --- the maths -------------------------------------------------------------------------

def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis (biased variance, as torch), float32."""
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = np.mean(centred * centred, axis=-1, keepdims=True)
    centred *= 1.0 / np.sqrt(variance + np.float32(eps))
    centred *= weight
    centred += bias
    return centred


def attention(qkv: np.ndarray, key_bias: np.ndarray, config: BertConfig) -> np.ndarray:
    """Multi-head self-attention from the fused projections qkv [B, T, 3H]; key_bias
    [B, 1, 1, T] is 0 for real tokens and -inf for padding. Returns the heads' outputs
    joined, [B, T, H]."""
    B, T, _ = qkv.shape
    heads, head_dim = config.num_heads, config.head_dim
    split = qkv.reshape(B, T, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)  # [3, B, h, T, d]
    q, k, v = split[0], split[1], split[2]
    scores = q @ k.transpose(0, 1, 3, 2)                                   # [B, h, T, T]
    scores *= np.float32(1.0 / np.sqrt(head_dim))
    scores += key_bias
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    context = scores @ v                                                   # [B, h, T, d]
    return context.transpose(0, 2, 1, 3).reshape(B, T, heads * head_dim)


def encode_batch(weights: BertWeights, config: BertConfig, ids: np.ndarray,
                 lengths: np.ndarray) -> np.ndarray:
    """ids [B, T] (rows padded after `lengths[b]` real tokens) -> hidden states [B, T, H]."""
    B, T = ids.shape
    eps = config.layer_norm_eps
    x = weights.word[ids] + weights.position[:T] + weights.token_type[0]  # [B, T, H]
    x = layer_norm(x, weights.embed_norm_w, weights.embed_norm_b, eps)
    real = np.arange(T)[None, :] < lengths[:, None]                         # [B, T]
    key_bias = np.where(real, np.float32(0.0), np.float32(-np.inf))[:, None, None, :]
    for layer in weights.layers:
        x = _block(x, layer, key_bias, config)
    return x


def _block(x: np.ndarray, layer: BertLayer, key_bias: np.ndarray,
           config: BertConfig) -> np.ndarray:
    """One post-LayerNorm transformer block on x [B, T, H]."""
    B, T, H = x.shape
    eps = config.layer_norm_eps
    qkv = x.reshape(B * T, H) @ layer.qkv_w                               # [B*T, 3H]
    qkv += layer.qkv_b
    context = attention(qkv.reshape(B, T, 3 * H), key_bias, config).reshape(B * T, H)
    attended = context @ layer.attn_out_w + layer.attn_out_b               # [B*T, H]
    attended += x.reshape(B * T, H)
    x2 = layer_norm(attended, layer.attn_norm_w, layer.attn_norm_b, eps)   # [B*T, H]
    inner = x2 @ layer.ffn_in_w                                            # [B*T, I]
    inner += layer.ffn_in_b
    gelu_erf_(inner)
    out = inner @ layer.ffn_out_w + layer.ffn_out_b                        # [B*T, H]
    out += x2
    return layer_norm(out, layer.ffn_norm_w, layer.ffn_norm_b, eps).reshape(B, T, H)
