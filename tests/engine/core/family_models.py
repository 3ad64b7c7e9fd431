"""Tiny random models of every served family, and the dense references the engine tests use.

`family_model(name)` builds a random model with the options of `llama` (Llama 3 RoPE
scaling), `qwen2` (q/k/v biases), `qwen3` (per-head q/k RMSNorm) or `gemma3` (q/k norms,
post-norms, sqrt(d) embedding scale, GeGLU, its own attention scale, and sliding windows of
WINDOW_TOKENS on two layers before one global layer, with their own RoPE base). Every extra
weight is random and away from its neutral value, so a path that skipped it would change the
logits. The vocabulary is the byte tokenizer's (256 bytes + EOS), so grammars can run.

The references are the dense forward of engine/model/llama.py over the whole sequence:
`dense_logprobs` (the log-softmax at chosen positions), `dense_embedding` (the mean-pooled,
L2-normalised final hidden states), and `unwindowed` (the same model with windows too wide
to hide anything, the reference a window-blind engine would match).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from engine.model import llama
from engine.model.spec import FamilyOptions, Llama3RopeScaling, Model
from engine.tokenizer.byte import ByteTokenizer
from tests.engine.core.engine_models import random_model

FAMILY_NAMES = ("llama", "qwen2", "qwen3", "gemma3")
BYTE_VOCAB = 257                    # 256 byte ids + "<|endoftext|>"
EOS_ID = 256
D_MODEL = 32
# (query heads, KV heads, head_dim) per family: qwen3 and gemma3 have H * hd != d as the real
# ones do (Qwen3 0.6B: 16 x 128 over 1024; Gemma 3 270M: 4 x 256 over 640, ONE KV head).
HEAD_SHAPES = {"llama": (4, 2, 8), "qwen2": (4, 2, 8), "qwen3": (4, 2, 16), "gemma3": (4, 1, 16)}
WINDOW_TOKENS = 8                   # gemma3's sliding window, shorter than the test prompts
GEMMA_LAYERS = (True, True, False)  # sliding, sliding, global (Gemma's 5:1, shortened)
GEMMA_QUERY_PRE_ATTN_SCALAR = 16    # scores scale 16**-0.5, not head_dim**-0.5
ROPE_THETA = 10000.0                # every family's global RoPE base but gemma3's
GEMMA_ROPE_THETA = 1e6              # gemma3's global layers' base
GEMMA_LOCAL_ROPE_THETA = 100.0      # its sliding layers' (not the global one: mixing them up shows)
NO_WINDOW_TOKENS = 10 ** 6          # a "window" no test sequence reaches
LLAMA3_SCALING = Llama3RopeScaling(  # with llama's head_dim 8 / theta 1e4: one pair kept, one
    factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,  # blended, two divided by 8
    original_max_positions=64)
NORM_SPREAD = 0.2                   # extra norms' weights are 1 + NORM_SPREAD * N(0, 1)
BIAS_SPREAD = 0.5                   # q/k/v biases are BIAS_SPREAD * N(0, 1)


def _options(name: str) -> FamilyOptions:
    if name == "llama":
        return FamilyOptions(family="llama", rope_scaling=LLAMA3_SCALING)
    if name == "qwen2":
        return FamilyOptions(family="qwen2", qkv_bias=True)
    if name == "qwen3":
        return FamilyOptions(family="qwen3", qk_norm=True)
    if name == "gemma3":
        return FamilyOptions(
            family="gemma3", qk_norm=True, post_norms=True, embed_scale=math.sqrt(D_MODEL),
            mlp_activation="gelu_tanh", attn_scale=GEMMA_QUERY_PRE_ATTN_SCALAR ** -0.5,
            sliding_window=WINDOW_TOKENS, sliding_layers=GEMMA_LAYERS, local_rope_theta=GEMMA_LOCAL_ROPE_THETA)
    raise ValueError(f"no such family {name!r} (have {FAMILY_NAMES})")


@functools.lru_cache(maxsize=None)
def family_model(name: str, *, eos: tuple[int, ...] = (), seed: int = 0) -> Model:
    """A random model of family `name` (one of FAMILY_NAMES) over the byte vocabulary.

    `eos` is the config's EOS ids (none by default, so greedy runs go to max_tokens and
    compare token for token with `dense_greedy`); cached: the models are never mutated.
    """
    options = _options(name)
    layers = len(GEMMA_LAYERS) if name == "gemma3" else 2
    heads, kv_heads, head_dim = HEAD_SHAPES[name]
    base = random_model(vocab=BYTE_VOCAB, d=D_MODEL, layers=layers, heads=heads,
                        kv_heads=kv_heads, head_dim=head_dim, eos=eos, seed=seed)
    rng = np.random.default_rng(seed + 1)

    def norm(size: int) -> np.ndarray:
        return (1 + NORM_SPREAD * rng.standard_normal(size)).astype(np.float32)

    extra = {}
    if options.qkv_bias:
        extra["bqkv"] = lambda layer: (BIAS_SPREAD * rng.standard_normal(layer.wqkv.shape[1])
                                       ).astype(np.float32)
    if options.qk_norm:
        extra["q_norm"] = lambda layer: norm(head_dim)
        extra["k_norm"] = lambda layer: norm(head_dim)
    if options.post_norms:
        extra["post_attn_norm"] = lambda layer: norm(D_MODEL)
        extra["post_mlp_norm"] = lambda layer: norm(D_MODEL)
    new_layers = tuple(dataclasses.replace(layer, **{k: make(layer) for k, make in extra.items()})
                       for layer in base.weights.layers)
    embed = base.weights.embed
    if options.embed_scale is not None:      # keep the residual stream's scale as the others'
        embed = (embed / np.float32(options.embed_scale)).astype(np.float32)
    weights = dataclasses.replace(base.weights, layers=new_layers, embed=embed)
    config = dataclasses.replace(base.config, options=options,
                                 rope_theta=GEMMA_ROPE_THETA if name == "gemma3" else ROPE_THETA)
    return Model(name=f"random-{name}", config=config, weights=weights,
                 tokenizer=ByteTokenizer())


def unwindowed(model: Model) -> Model:
    """The same weights with sliding windows too wide to hide any key (the same layers keep
    their local RoPE base): what an engine that ignored the window would compute."""
    options = dataclasses.replace(model.config.options, sliding_window=NO_WINDOW_TOKENS)
    return dataclasses.replace(model, config=dataclasses.replace(model.config, options=options))


def dense_log_softmax(model: Model, ids) -> np.ndarray:
    """log-softmax of the dense logits at every position, float64 [n, V]."""
    logits = llama.forward(model.config, model.weights, list(ids)).astype(np.float64)   # [n, V]
    logits -= logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def dense_logprobs(model: Model, prompt, generated) -> np.ndarray:
    """The dense logprob of each generated token given everything before it, float64 [g]."""
    seq = list(prompt) + list(generated)
    table = dense_log_softmax(model, seq[:-1])                              # [P+g-1, V]
    rows = np.arange(len(prompt) - 1, len(seq) - 1)                         # [g]
    return table[rows, np.asarray(generated, dtype=np.int64)]


def dense_embedding(model: Model, ids) -> np.ndarray:
    """Mean-pooled, L2-normalised final hidden states of one input, float64 [d]."""
    pooled = llama.hidden_states(model.config, model.weights, list(ids)).astype(np.float64).mean(axis=0)
    return pooled / np.linalg.norm(pooled)
