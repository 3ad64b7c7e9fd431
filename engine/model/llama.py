"""The dense reference decoder forward pass, in float32 numpy, as small pure functions.

What it is: the maths of one Llama-architecture decoder (RMSNorm, rotary position
embeddings with `rope_theta`, grouped-query attention, a SwiGLU MLP, a tied or untied LM
head) over the weights in `engine.model.spec.LlamaWeights`, plus a plain contiguous K/V
cache and a token-by-token `generate` loop. The paged engine (`engine/core/engine.py`) reuses
these functions and must produce the same numbers: this module is its reference.

What it is not: batching, paging, scheduling or sampling. Ids in, logits out.

Conventions (fixed by `engine/model/spec.py`):

* activations are rows: `x: [n, d]` holds `n` token positions;
* weights are input-major, so a projection is `x @ W` with `W: [in, out]` (computed by
  `engine/model/project.py` in the shape OpenBLAS does fastest for the row count);
* Q, K and V come from ONE matmul with the fused `wqkv` (columns q | k | v), the gate and
  up projections from ONE matmul with `w_gate_up` (columns gate | up);
* RoPE uses Hugging Face's rotate-half convention: a head vector is split into halves
  `(x1, x2)` and rotated by the angle `position * inv_freq[i]` of pair `i`
  (`engine/model/rope.py`: `theta**(-2i/hd)`, or the family's scaled frequencies);
* the family's options (`config.options`) add q/k/v biases and per-head q/k norms, and
  Gemma 3's: embeddings x sqrt(d), RMSNorm on each sublayer's output (post-norms), a GeGLU
  MLP (gelu_tanh), and per layer a sliding window (keys j with i - window < j <= i) and
  RoPE base.

Shape names: n query rows, m key rows, d hidden size, H query heads, KV key/value heads,
g = H // KV query heads per KV head, hd head dim, ff MLP width, V vocabulary.

Performance notes: a batch-1 decode step is bound by streaming the float32 weights from
memory, so each step does exactly one matmul per weight matrix and computes the LM head
only for the rows that need logits (a prefill needs only its last row). The elementwise
work is done in place where it is cheap to do so; nothing is promoted to float64.
"""
from __future__ import annotations

from typing import Callable, Iterator, Sequence

import numpy as np

from engine.model import rope
from engine.model.lora_batch import LayerLora, add_low_rank
from engine.model.project import project
from engine.model.spec import LayerWeights, LlamaWeights, ModelConfig

F32 = np.float32

# Attention materialises a [H, n, m] score array. Queries are processed in chunks so that
# array stays below this many float32 elements (64 MiB), whatever the prompt length.
MAX_SCORE_ELEMENTS = 16 * 1024 * 1024

# Causal prefill: queries go in blocks of this many rows, and when the keys are sorted by
# position each block only multiplies the keys it can see (about 60% of the work of the
# full square for a 512-token prompt).
CAUSAL_QUERY_BLOCK = 128

# GELU's tanh approximation: sqrt(2/pi) and the cubic term's coefficient.
GELU_SQRT_2_OVER_PI = 0.7978845608028654
GELU_CUBIC = 0.044715

# A contiguous cache starts with room for this many tokens when the caller gives no size.
DEFAULT_CACHE_TOKENS = 256


# --------------------------------------------------------------------------- building blocks

def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Root-mean-square layer norm: x / sqrt(mean(x^2) + eps) * weight (all float32)."""
    mean_sq = np.einsum("nd,nd->n", x, x)[:, None] / F32(x.shape[-1])  # [n, d] -> [n, 1]
    inv_rms = F32(1.0) / np.sqrt(mean_sq + F32(eps))                   # [n, 1]
    out = x * inv_rms                                                   # [n, d]
    out *= weight
    return out


def rope_for(config: ModelConfig, positions, layer: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) [n, hd/2] for the config's family (Llama 3 scaling, GGUF divisors...) and
    layer `layer`'s RoPE base (sliding layers may have their own; -1: the global base)."""
    theta = config.rope_theta if layer < 0 else config.layer_rope_theta(layer)
    inv_freq = rope.inv_freq_for(config.head_dim, theta, config.options)   # [hd/2]
    factor = config.options.global_rope_linear_factor
    if factor is not None and (layer < 0 or config.options.layer_window(layer) is None):
        inv_freq = (inv_freq / F32(factor)).astype(F32)     # transformers' linear: inv_freq /= f
    return rope.cos_sin(positions, inv_freq)


def rope_per_layer(config: ModelConfig, positions) -> list[tuple[np.ndarray, np.ndarray]]:
    """(cos, sin) [n, hd/2] of every layer; layers with the same RoPE base and kind (sliding
    or global: a linear factor scales only the global ones) share arrays."""
    by_kind: dict[tuple[float, bool], tuple[np.ndarray, np.ndarray]] = {}
    tables = []
    for layer in range(config.num_layers):
        kind = (config.layer_rope_theta(layer), config.options.layer_window(layer) is None)
        if kind not in by_kind:
            by_kind[kind] = rope_for(config, positions, layer)
        tables.append(by_kind[kind])
    return tables


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate each head vector by its position's angles (rotate-half convention).

    x [n, heads, hd], cos/sin [n, hd/2] -> [n, heads, hd]:
    first half x1*cos - x2*sin, second half x2*cos + x1*sin.
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]                               # [n, heads, hd/2] each
    c, s = cos[:, None, :], sin[:, None, :]                             # [n, 1, hd/2]
    out = np.empty(x.shape, dtype=F32)                                  # [n, heads, hd]
    np.multiply(x1, c, out=out[..., :half])
    out[..., :half] -= x2 * s
    np.multiply(x2, c, out=out[..., half:])
    out[..., half:] += x1 * s
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
              q_positions, k_positions, *, window: int | None = None,
              scale: float | None = None) -> np.ndarray:
    """Causal grouped-query attention by positions.

    q [n, H, hd], k/v [m, KV, hd]; key j is visible to query i iff
    k_positions[j] <= q_positions[i] (every query must see at least one key) and, with a
    sliding `window`, k_positions[j] > q_positions[i] - window (Hugging Face's mask).
    Scores are scaled by `scale` (None: hd**-0.5).
    Query head h reads KV head h // (H // KV). Returns [n, H*hd] float32.
    """
    n, num_heads, hd = q.shape
    m, num_kv, _ = k.shape
    group = num_heads // num_kv
    q_pos = np.asarray(q_positions)
    k_pos = np.asarray(k_positions)
    # Strided views, no copies: each 2-D slice has unit stride on one axis, which BLAS
    # takes as a transposed or row-strided operand.
    kt = k.transpose(1, 2, 0)                                           # [KV, hd, m]
    vt = v.transpose(1, 0, 2)                                           # [KV, m, hd]
    sees_all = k_pos.max() <= q_pos.min()                               # e.g. a decode row
    if window is not None:
        sees_all = sees_all and k_pos.min() > q_pos.max() - window
    keys_sorted = sees_all or bool(np.all(k_pos[:-1] <= k_pos[1:]))
    scale = F32(hd ** -0.5 if scale is None else scale)
    rows = max(1, MAX_SCORE_ELEMENTS // max(1, num_heads * m))
    if not sees_all:
        rows = min(rows, CAUSAL_QUERY_BLOCK)
    pieces = []
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        nc = stop - start
        # keys past the block's last position are hidden from all of it: skip them
        mc = int(np.searchsorted(k_pos, q_pos[start:stop].max(), side="right")) \
            if keys_sorted else m
        qc = (q[start:stop] * scale).reshape(nc, num_kv, group, hd)
        qc = qc.transpose(1, 2, 0, 3).reshape(num_kv, group * nc, hd)   # [KV, g*nc, hd]
        scores = qc @ kt[:, :, :mc]                                     # [KV, g*nc, mc]
        if not sees_all:
            hidden = k_pos[None, :mc] > q_pos[start:stop, None]         # [nc, mc]
            if window is not None:
                hidden |= k_pos[None, :mc] <= q_pos[start:stop, None] - window
            np.copyto(scores.reshape(num_kv, group, nc, mc), -np.inf, where=hidden)
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)                    # softmax over keys
        ctx = (scores @ vt[:, :mc]).reshape(num_kv, group, nc, hd)      # [KV, g, nc, hd]
        pieces.append(ctx.transpose(2, 0, 1, 3).reshape(nc, num_heads * hd))  # [nc, H*hd]
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)    # [n, H*hd]


def qkv_project(x_normed: np.ndarray, layer: LayerWeights, config: ModelConfig,
                cos: np.ndarray, sin: np.ndarray, lora: LayerLora | None = None):
    """One fused matmul -> (q [n, H, hd], k [n, KV, hd], v [n, KV, hd]), RoPE on q and k.

    The family's options add the q/k/v biases (Qwen2) and the per-head q/k RMSNorm before
    RoPE (Qwen3); `lora` adds the adapters' products to their rows' q | k | v, like the
    bias before the norms and RoPE (engine/model/lora_batch.py)."""
    n = x_normed.shape[0]
    qs, kvs, hd = config.q_size, config.kv_size, config.head_dim
    qkv = project(x_normed, layer.wqkv)                                 # [n, d] -> [n, qs+2*kvs]
    if layer.bqkv is not None:
        qkv += layer.bqkv                                               # [qs+2*kvs]
    if lora is not None:
        add_low_rank(qkv, x_normed, lora.qkv)                           # [n_a, qs+2*kvs] per adapter
    heads_qk = config.num_heads + config.num_kv_heads
    qk = qkv[:, :qs + kvs].reshape(n, heads_qk, hd)                     # [n, H+KV, hd]
    if layer.q_norm is not None:
        qk = _head_norms(qk, layer, config)
    qk = apply_rope(qk, cos, sin)                                       # [n, H+KV, hd]
    q, k = qk[:, :config.num_heads], qk[:, config.num_heads:]           # [n, H, hd], [n, KV, hd]
    v = qkv[:, qs + kvs:].reshape(n, config.num_kv_heads, hd)           # [n, KV, hd]
    return q, k, v


def _head_norms(qk: np.ndarray, layer: LayerWeights, config: ModelConfig) -> np.ndarray:
    """RMSNorm over each head vector, q heads with q_norm, k heads with k_norm. [n, H+KV, hd]."""
    n, heads_qk, hd = qk.shape
    h, eps = config.num_heads, config.rms_norm_eps
    out = np.empty(qk.shape, dtype=F32)
    out[:, :h] = rms_norm(qk[:, :h].reshape(n * h, hd), layer.q_norm, eps).reshape(n, h, hd)
    kv = heads_qk - h
    out[:, h:] = rms_norm(qk[:, h:].reshape(n * kv, hd), layer.k_norm, eps).reshape(n, kv, hd)
    return out


def mlp(x_normed: np.ndarray, layer: LayerWeights, ff: int,
        activation: str = "silu", lora: LayerLora | None = None) -> np.ndarray:
    """Gated MLP: (act(x @ W_gate) * (x @ W_up)) @ W_down, with gate|up fused. [n, d] -> [n, d].

    act is silu (SwiGLU, Llama/Qwen) or gelu_tanh (GeGLU, Gemma); `lora` adds the
    adapters' products to gate | up and to down, on their rows."""
    gate_up = project(x_normed, layer.w_gate_up)                        # [n, d] -> [n, 2*ff]
    if lora is not None:
        add_low_rank(gate_up, x_normed, lora.gate_up)                   # [n_a, 2*ff] per adapter
    gate, up = gate_up[:, :ff], gate_up[:, ff:]                         # [n, ff] each
    if activation == "gelu_tanh":
        act = _gelu_tanh(gate)
    else:   # silu(g) = g * sigmoid(g), sigmoid(g) = (1 + tanh(g/2)) / 2: no overflow for large |g|.
        act = np.multiply(gate, F32(0.5))                               # [n, ff]
        np.tanh(act, out=act)
        act += F32(1.0)
        act *= F32(0.5)
        act *= gate
    act *= up
    out = project(act, layer.w_down)                                    # [n, ff] -> [n, d]
    if lora is not None:
        add_low_rank(out, act, lora.down)                               # [n_a, d] per adapter
    return out


def _gelu_tanh(gate: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (PyTorch's gelu(approximate="tanh")), float32 [n, ff]:
    0.5 * g * (1 + tanh(sqrt(2/pi) * (g + 0.044715 * g^3)))."""
    inner = gate * gate                                                 # [n, ff]
    inner *= F32(GELU_CUBIC)
    inner += F32(1.0)
    inner *= gate
    inner *= F32(GELU_SQRT_2_OVER_PI)
    np.tanh(inner, out=inner)
    inner += F32(1.0)
    inner *= gate
    inner *= F32(0.5)
    return inner


def logits_from_hidden(weights: LlamaWeights, h: np.ndarray) -> np.ndarray:
    """Final-normed hidden rows -> logits: [n, d] @ [d, V] -> [n, V]."""
    return project(h, weights.lm_head)


def embed(weights: LlamaWeights, ids, scale: float | None = None) -> np.ndarray:
    """Token ids [n] -> embedding rows [n, d] (a gather, float32), times `scale` if given
    (Gemma: sqrt(d), rounded to float32 first as Hugging Face does)."""
    rows = weights.embed[np.asarray(ids, dtype=np.int64)]               # [n] -> [n, d]
    if scale is not None:
        rows *= F32(scale)
    return rows


# --------------------------------------------------------------------------- the layer stack

def decoder_layer(x: np.ndarray, layer: LayerWeights, config: ModelConfig,
                  cos: np.ndarray, sin: np.ndarray,
                  attend: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """One pre-norm block: x + attn(norm(x)), then + mlp(norm(.)). [n, d] -> [n, d].

    `attend(q, k, v)` runs attention for these rows against whatever keys the caller
    holds (the rows themselves, a contiguous cache, a paged cache) and returns [n, H*hd].
    """
    h = rms_norm(x, layer.attn_norm, config.rms_norm_eps)               # [n, d]
    q, k, v = qkv_project(h, layer, config, cos, sin)
    x = x + post_norm(project(attend(q, k, v), layer.wo), layer.post_attn_norm, config)  # [n, d]
    h = rms_norm(x, layer.mlp_norm, config.rms_norm_eps)                # [n, d]
    x += post_norm(mlp(h, layer, config.intermediate_size, config.options.mlp_activation),
                   layer.post_mlp_norm, config)                         # [n, d]
    return x


def post_norm(out: np.ndarray, weight: np.ndarray | None, config: ModelConfig) -> np.ndarray:
    """A sublayer's output [n, d], RMS-normed when the family has post-norms (Gemma)."""
    return out if weight is None else rms_norm(out, weight, config.rms_norm_eps)


def hidden_states(config: ModelConfig, weights: LlamaWeights, ids) -> np.ndarray:
    """Token ids [n] (positions 0..n-1) -> final-normed hidden states [n, d] float32."""
    ids = np.asarray(ids, dtype=np.int64)
    positions = np.arange(ids.shape[0])
    ropes = rope_per_layer(config, positions)                           # [(cos, sin)] per layer
    x = embed(weights, ids, config.options.embed_scale)                 # [n, d]
    for index, layer in enumerate(weights.layers):
        def attend_self(q, k, v, index=index):
            return attention(q, k, v, positions, positions, scale=config.attn_scale,
                             window=config.options.layer_window(index))
        x = decoder_layer(x, layer, config, *ropes[index], attend_self)
    return rms_norm(x, weights.final_norm, config.rms_norm_eps)         # [n, d]


def forward(config: ModelConfig, weights: LlamaWeights, ids) -> np.ndarray:
    """Token ids [n] -> logits [n, V] for every position (the dense reference)."""
    return logits_from_hidden(weights, hidden_states(config, weights, ids))


# --------------------------------------------------------------------------- contiguous cache

class DenseCache:
    """Per-layer K/V for one sequence in contiguous arrays: k[layer][:num_tokens], v likewise.

    Arrays are [capacity, KV, hd] per layer and double when full. `num_tokens` only moves
    forward after all layers of a step have written (`advance`).
    """
    __slots__ = ("k", "v", "num_tokens", "capacity_tokens")

    def __init__(self, config: ModelConfig, capacity_tokens: int = DEFAULT_CACHE_TOKENS):
        self.capacity_tokens = max(1, int(capacity_tokens))
        shape = (self.capacity_tokens, config.num_kv_heads, config.head_dim)
        self.k = [np.empty(shape, dtype=F32) for _ in range(config.num_layers)]
        self.v = [np.empty(shape, dtype=F32) for _ in range(config.num_layers)]
        self.num_tokens = 0

    def reserve(self, total_tokens: int) -> None:
        """Make room for `total_tokens` positions, doubling the arrays as needed."""
        if total_tokens <= self.capacity_tokens:
            return
        new_cap = self.capacity_tokens
        while new_cap < total_tokens:
            new_cap *= 2
        for arrays in (self.k, self.v):
            for i, old in enumerate(arrays):
                grown = np.empty((new_cap,) + old.shape[1:], dtype=F32)
                grown[:self.num_tokens] = old[:self.num_tokens]
                arrays[i] = grown
        self.capacity_tokens = new_cap

    def write_and_view(self, layer_index: int, k: np.ndarray, v: np.ndarray):
        """Store the new rows after the cached ones; return all keys/values [m, KV, hd]."""
        start, end = self.num_tokens, self.num_tokens + k.shape[0]
        self.k[layer_index][start:end] = k
        self.v[layer_index][start:end] = v
        return self.k[layer_index][:end], self.v[layer_index][:end]

    def advance(self, num_new_tokens: int) -> None:
        self.num_tokens += num_new_tokens


def forward_cached(config: ModelConfig, weights: LlamaWeights, ids, cache: DenseCache,
                   *, last_only: bool = True) -> np.ndarray:
    """Run new tokens `ids` [n] after the `cache.num_tokens` cached ones; extend the cache.

    Returns logits [1, V] for the last new row (last_only) or [n, V] for all of them.
    """
    ids = np.asarray(ids, dtype=np.int64)
    n, start = ids.shape[0], cache.num_tokens
    cache.reserve(start + n)
    q_positions = np.arange(start, start + n)
    k_positions = np.arange(start + n)
    ropes = rope_per_layer(config, q_positions)                         # [(cos, sin)] per layer
    x = embed(weights, ids, config.options.embed_scale)                 # [n, d]
    for index, layer in enumerate(weights.layers):
        def attend_cached(q, k, v, index=index):
            keys, values = cache.write_and_view(index, k, v)            # [start+n, KV, hd]
            return attention(q, keys, values, q_positions, k_positions, scale=config.attn_scale,
                             window=config.options.layer_window(index))
        x = decoder_layer(x, layer, config, *ropes[index], attend_cached)
    cache.advance(n)
    rows = x[-1:] if last_only else x                                   # [1 or n, d]
    return logits_from_hidden(weights, rms_norm(rows, weights.final_norm, config.rms_norm_eps))


def greedy_token(logits_row: np.ndarray) -> int:
    """The sample function of greedy decoding: the index of the largest logit."""
    return int(np.argmax(logits_row))


def generate(config: ModelConfig, weights: LlamaWeights, prompt_ids: Sequence[int], *,
             max_new_tokens: int, stop_ids=(), sample_fn: Callable[[np.ndarray], int] | None = None
             ) -> Iterator[int]:
    """Yield new token ids one by one: one prefill of the prompt, then one-token decodes.

    `sample_fn(logits_row [V]) -> token id` picks each token (greedy argmax when None; a
    stateful closure can count its calls for seeded sampling). A token in `stop_ids` is
    yielded and ends the generation; so do `max_new_tokens` tokens and the model's
    context limit (`max_position_embeddings`).
    """
    pick = sample_fn or greedy_token
    stops = frozenset(int(t) for t in stop_ids)
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise ValueError("generate needs at least one prompt token")
    budget = min(int(max_new_tokens), config.max_position_embeddings - len(prompt))
    if budget <= 0:
        return
    cache = DenseCache(config, len(prompt) + budget)
    logits = forward_cached(config, weights, prompt, cache)             # [1, V]
    for produced in range(budget):
        token = int(pick(logits[0]))
        yield token
        if token in stops or produced + 1 == budget:
            return
        logits = forward_cached(config, weights, [token], cache)        # [1, V]
