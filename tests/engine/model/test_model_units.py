"""The dense model's maths on small random Llamas, against a naive float64 reference.

The reference below is written independently of engine/model/llama.py: per token, per head,
with explicit loops, in float64, using the textbook formulas (complex-pair RoPE on the
(i, i + hd/2) pairs, GQA by repeating each KV head for its H // KV query heads).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.model import llama as model
from engine.model.spec import LayerWeights, LlamaWeights, ModelConfig


def make_config(**over) -> ModelConfig:
    base = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2,
                num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=10000.0,
                rms_norm_eps=1e-5, max_position_embeddings=128)
    base.update(over)
    return ModelConfig(**base)


def make_weights(config: ModelConfig, seed: int = 0, tied: bool = True) -> LlamaWeights:
    rng = np.random.default_rng(seed)
    d, ff = config.hidden_size, config.intermediate_size
    qkv_cols = config.q_size + 2 * config.kv_size

    def w(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    layers = tuple(
        LayerWeights(attn_norm=(1 + w(d, scale=0.1)), wqkv=w(d, qkv_cols), wo=w(config.q_size, d),
                     mlp_norm=(1 + w(d, scale=0.1)), w_gate_up=w(d, 2 * ff), w_down=w(ff, d))
        for _ in range(config.num_layers))
    embed = w(config.vocab_size, d, scale=1.0)
    lm_head = embed.T if tied else w(d, config.vocab_size)
    return LlamaWeights(embed=embed, layers=layers, final_norm=1 + w(d, scale=0.1), lm_head=lm_head)


# --------------------------------------------------------------------------- naive reference

def ref_rms(x, weight, eps):
    x = np.asarray(x, dtype=np.float64)
    return x / math.sqrt(float(np.mean(x * x)) + eps) * np.asarray(weight, dtype=np.float64)


def ref_rope(vec, pos, theta):
    """Rotate pair (vec[i], vec[i + half]) by angle pos * theta^(-2i/hd) as a complex number."""
    hd = vec.shape[0]
    half = hd // 2
    out = np.empty(hd)
    for i in range(half):
        angle = pos * theta ** (-2.0 * i / hd)
        z = complex(vec[i], vec[i + half]) * complex(math.cos(angle), math.sin(angle))
        out[i], out[i + half] = z.real, z.imag
    return out


def ref_hidden(config: ModelConfig, weights: LlamaWeights, ids):
    """Token-by-token float64 forward with an explicit list of past keys and values."""
    H, KV, hd, ff = config.num_heads, config.num_kv_heads, config.head_dim, config.intermediate_size
    group = H // KV
    past_k = [[] for _ in weights.layers]
    past_v = [[] for _ in weights.layers]
    finals = []
    for pos, tok in enumerate(ids):
        x = weights.embed[tok].astype(np.float64)
        for li, layer in enumerate(weights.layers):
            h = ref_rms(x, layer.attn_norm, config.rms_norm_eps)
            qkv = h @ layer.wqkv.astype(np.float64)
            q = qkv[:H * hd].reshape(H, hd)
            k = qkv[H * hd:H * hd + KV * hd].reshape(KV, hd)
            v = qkv[H * hd + KV * hd:].reshape(KV, hd)
            q = np.stack([ref_rope(q[h_], pos, config.rope_theta) for h_ in range(H)])
            k = np.stack([ref_rope(k[j], pos, config.rope_theta) for j in range(KV)])
            past_k[li].append(k)
            past_v[li].append(v)
            heads = []
            for h_ in range(H):
                kv = h_ // group
                scores = np.array([q[h_] @ pk[kv] for pk in past_k[li]]) / math.sqrt(hd)
                p = np.exp(scores - scores.max())
                p /= p.sum()
                heads.append(sum(pi * pv[kv] for pi, pv in zip(p, past_v[li])))
            x = x + np.concatenate(heads) @ layer.wo.astype(np.float64)
            h = ref_rms(x, layer.mlp_norm, config.rms_norm_eps)
            gu = h @ layer.w_gate_up.astype(np.float64)
            g, u = gu[:ff], gu[ff:]
            x = x + (g / (1 + np.exp(-g)) * u) @ layer.w_down.astype(np.float64)
        finals.append(ref_rms(x, weights.final_norm, config.rms_norm_eps))
    return np.stack(finals)


# --------------------------------------------------------------------------- building blocks

def test_rms_norm_matches_formula():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 32)).astype(np.float32) * 3
    w = rng.standard_normal(32).astype(np.float32)
    got = model.rms_norm(x, w, 1e-5)
    want = np.stack([ref_rms(row, w, 1e-5) for row in x])
    assert got.dtype == np.float32 and got.shape == (5, 32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_rope_rotates_half_pairs_by_position_angles():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 3, 16)).astype(np.float32)
    positions = np.array([0, 1, 2, 7, 50, 1000])
    cos, sin = model.rope_for(make_config(head_dim=16, rope_theta=500.0), positions)
    assert cos.shape == (6, 8) and cos.dtype == np.float32
    got = model.apply_rope(x, cos, sin)
    for i, pos in enumerate(positions):
        for h in range(3):
            # float32 angles (as Hugging Face computes them) drift ~1e-7 * position
            np.testing.assert_allclose(got[i, h], ref_rope(x[i, h].astype(np.float64), pos, 500.0),
                                       rtol=1e-4, atol=2e-4)
    np.testing.assert_array_equal(got[0], x[0])          # position 0 is the identity


def test_rope_scores_depend_only_on_relative_position():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 1, 8)).astype(np.float32)
    k = rng.standard_normal((1, 1, 8)).astype(np.float32)
    config = make_config(head_dim=8, rope_theta=10000.0)

    def score(pq, pk):
        cq, sq = model.rope_for(config, [pq])
        ck, sk = model.rope_for(config, [pk])
        return float((model.apply_rope(q, cq, sq) * model.apply_rope(k, ck, sk)).sum())

    assert score(5, 3) == pytest.approx(score(12, 10), rel=1e-4)
    assert score(5, 3) != pytest.approx(score(5, 4), rel=1e-3)


def test_attention_is_causal_by_positions_with_grouped_heads():
    rng = np.random.default_rng(4)
    n, m, H, KV, hd = 3, 7, 6, 2, 4
    q = rng.standard_normal((n, H, hd)).astype(np.float32)
    k = rng.standard_normal((m, KV, hd)).astype(np.float32)
    v = rng.standard_normal((m, KV, hd)).astype(np.float32)
    q_pos = np.array([4, 5, 6])
    k_pos = np.arange(7)
    got = model.attention(q, k, v, q_pos, k_pos)
    assert got.shape == (n, H * hd)
    for i in range(n):
        for h in range(H):
            kv = h // (H // KV)
            visible = [j for j in range(m) if k_pos[j] <= q_pos[i]]
            s = np.array([q[i, h] @ k[j, kv] for j in visible], dtype=np.float64) / math.sqrt(hd)
            p = np.exp(s - s.max())
            p /= p.sum()
            want = sum(pj * v[j, kv] for pj, j in zip(p, visible))
            np.testing.assert_allclose(got[i, h * hd:(h + 1) * hd], want, rtol=1e-5, atol=1e-5)


def test_attention_query_chunking_gives_the_same_result(monkeypatch):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((9, 4, 8)).astype(np.float32)
    k = rng.standard_normal((9, 2, 8)).astype(np.float32)
    v = rng.standard_normal((9, 2, 8)).astype(np.float32)
    pos = np.arange(9)
    whole = model.attention(q, k, v, pos, pos)
    monkeypatch.setattr(model, "MAX_SCORE_ELEMENTS", 4 * 9 * 2)   # two query rows per chunk
    np.testing.assert_allclose(model.attention(q, k, v, pos, pos), whole, rtol=1e-6, atol=1e-6)


def test_attention_does_not_depend_on_key_order_or_query_blocking(monkeypatch):
    rng = np.random.default_rng(12)
    n = 40
    q = rng.standard_normal((n, 4, 8)).astype(np.float32)
    k = rng.standard_normal((n, 2, 8)).astype(np.float32)
    v = rng.standard_normal((n, 2, 8)).astype(np.float32)
    pos = np.arange(n)
    whole = model.attention(q, k, v, pos, pos)
    perm = rng.permutation(n)                       # keys gathered in any order
    np.testing.assert_allclose(model.attention(q, k[perm], v[perm], pos, pos[perm]), whole,
                               rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(model, "CAUSAL_QUERY_BLOCK", 7)
    np.testing.assert_allclose(model.attention(q, k, v, pos, pos), whole, rtol=1e-5, atol=1e-6)
    # a query block of late positions against a longer, partly hidden key range
    np.testing.assert_allclose(model.attention(q[30:], k, v, pos[30:], pos), whole[30:],
                               rtol=1e-5, atol=1e-6)


def test_mlp_is_swiglu_with_fused_gate_up():
    config = make_config()
    layer = make_weights(config).layers[0]
    x = np.random.default_rng(6).standard_normal((3, 32)).astype(np.float32)
    ff = config.intermediate_size
    g = x.astype(np.float64) @ layer.w_gate_up[:, :ff]
    u = x.astype(np.float64) @ layer.w_gate_up[:, ff:]
    want = (g / (1 + np.exp(-g)) * u) @ layer.w_down
    np.testing.assert_allclose(model.mlp(x, layer, ff), want, rtol=1e-4, atol=1e-4)


def test_mlp_survives_huge_gate_values_without_overflow():
    config = make_config()
    layer = make_weights(config).layers[0]
    x = np.full((1, 32), 300.0, dtype=np.float32)
    with np.errstate(all="raise"):
        out = model.mlp(x, layer, config.intermediate_size)
    assert np.all(np.isfinite(out))


# --------------------------------------------------------------------------- whole model

@pytest.mark.parametrize("over", [{}, {"head_dim": 12, "num_heads": 3, "num_kv_heads": 1},
                                  {"num_kv_heads": 4}])
def test_hidden_states_match_naive_token_by_token_reference(over):
    config = make_config(**over)
    weights = make_weights(config, seed=7)
    ids = [3, 17, 5, 5, 60, 0, 42]
    got = model.hidden_states(config, weights, ids)
    assert got.dtype == np.float32 and got.shape == (7, config.hidden_size)
    np.testing.assert_allclose(got, ref_hidden(config, weights, ids), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tied", [True, False])
def test_forward_is_hidden_states_through_the_lm_head(tied):
    config = make_config(tie_word_embeddings=tied)
    weights = make_weights(config, seed=8, tied=tied)
    ids = [1, 2, 3, 4]
    logits = model.forward(config, weights, ids)
    assert logits.shape == (4, config.vocab_size) and logits.dtype == np.float32
    want = ref_hidden(config, weights, ids) @ weights.lm_head.astype(np.float64)
    np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-3)


def test_cached_forward_in_pieces_equals_one_dense_forward():
    config = make_config()
    weights = make_weights(config, seed=9)
    ids = [5, 9, 2, 33, 8, 1, 14, 14, 3]
    dense = model.forward(config, weights, ids)
    cache = model.DenseCache(config, capacity_tokens=2)   # forces the arrays to grow
    parts = [model.forward_cached(config, weights, ids[:4], cache, last_only=False),
             model.forward_cached(config, weights, ids[4:5], cache, last_only=False),
             model.forward_cached(config, weights, ids[5:], cache, last_only=False)]
    assert cache.num_tokens == len(ids) and cache.capacity_tokens >= len(ids)
    np.testing.assert_allclose(np.concatenate(parts), dense, rtol=1e-5, atol=1e-4)
    last = model.forward_cached(config, weights, [7], model.DenseCache(config), last_only=True)
    assert last.shape == (1, config.vocab_size)


def test_generate_greedy_equals_argmax_of_repeated_full_forwards():
    config = make_config()
    weights = make_weights(config, seed=10)
    prompt = [4, 8, 15, 16]
    got = list(model.generate(config, weights, prompt, max_new_tokens=10))
    seq = list(prompt)
    want = []
    for _ in range(10):
        tok = int(np.argmax(model.forward(config, weights, seq)[-1]))
        want.append(tok)
        seq.append(tok)
    assert got == want


def test_generate_stops_on_a_stop_id_and_yields_it():
    config = make_config()
    weights = make_weights(config, seed=10)
    prompt = [4, 8, 15, 16]
    free = list(model.generate(config, weights, prompt, max_new_tokens=10))
    stop = free[3]
    first = free.index(stop)
    got = list(model.generate(config, weights, prompt, max_new_tokens=10, stop_ids=(stop,)))
    assert got == free[:first + 1]


def test_generate_respects_max_tokens_context_limit_and_sample_fn():
    config = make_config(max_position_embeddings=8)
    weights = make_weights(config, seed=11)
    assert len(list(model.generate(config, weights, [1, 2, 3], max_new_tokens=3))) == 3
    assert len(list(model.generate(config, weights, [1, 2, 3], max_new_tokens=50))) == 5
    seen = []

    def always_seven(row):
        seen.append(row.shape)
        return 7

    out = list(model.generate(config, weights, [1, 2], max_new_tokens=4, sample_fn=always_seven))
    assert out == [7, 7, 7, 7] and seen == [(config.vocab_size,)] * 4
