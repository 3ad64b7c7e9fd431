"""Tiny in-memory models for the engine tests: random Llamas and the zero-layer `succ`.

Random weights are scaled so the logits spread over a few units: greedy choices then have
clear margins and float32 reordering (paged vs dense, batched vs alone) cannot flip them.
"""
from __future__ import annotations

import numpy as np

from engine.model import llama
from engine.api import SamplingParams
from engine.model.spec import LayerWeights, LlamaWeights, Model, ModelConfig


GREEDY = SamplingParams(temperature=0.0)      # argmax sampling, the differential tests' default


def frozen_clock() -> float:
    """An engine clock that never moves: steps take 0 s, so the speculation policy learns no
    step times and keeps its priors -- which drafts a test sees does not depend on how fast
    or how loaded the machine is (outputs never depend on it anyway)."""
    return 0.0


def logits_of(model: Model, ids) -> np.ndarray:
    """The dense reference forward of a loaded model: token ids [n] -> logits [n, V]."""
    return llama.forward(model.config, model.weights, ids)


def random_model(*, vocab: int = 64, d: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                 head_dim: int = 8, ff: int = 48, max_pos: int = 512, eos=(), seed: int = 0) -> Model:
    rng = np.random.default_rng(seed)

    def mat(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(rows)).astype(np.float32)

    cfg = ModelConfig(vocab_size=vocab, hidden_size=d, intermediate_size=ff, num_layers=layers,
                      num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                      max_position_embeddings=max_pos, eos_token_ids=tuple(eos), rope_theta=10000.0)
    qkv_cols = heads * head_dim + 2 * kv_heads * head_dim
    layer_list = tuple(LayerWeights(
        attn_norm=(1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
        wqkv=mat(d, qkv_cols, 2.0), wo=mat(heads * head_dim, d, 1.0),
        mlp_norm=(1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
        w_gate_up=mat(d, 2 * ff, 1.0), w_down=mat(ff, d, 1.0)) for _ in range(layers))
    embed = rng.standard_normal((vocab, d)).astype(np.float32)
    weights = LlamaWeights(embed=embed, layers=layer_list, final_norm=np.ones(d, np.float32),
                           lm_head=mat(d, vocab, 8.0))
    return Model(name="random", config=cfg, weights=weights, tokenizer=None)


def succ_model(vocab: int = 256) -> Model:
    """Zero layers; byte i -> i+1 (mod vocab) with an identity embedding and a shifted head."""
    cfg = ModelConfig(vocab_size=vocab, hidden_size=vocab, intermediate_size=1, num_layers=0,
                      num_heads=1, num_kv_heads=1, head_dim=2, max_position_embeddings=64)
    embed = np.eye(vocab, dtype=np.float32)
    head = np.roll(np.eye(vocab, dtype=np.float32), 1, axis=1) * 20.0     # row i -> column i+1
    weights = LlamaWeights(embed=embed, layers=(), final_norm=np.ones(vocab, np.float32), lm_head=head)
    return Model(name="succ", config=cfg, weights=weights, tokenizer=None)


def dense_greedy(model: Model, prompt, max_new: int, stop_ids=()) -> list[int]:
    """The reference: the dense cached generate loop of engine/model/llama.py, greedy."""
    return list(llama.generate(model.config, model.weights, list(prompt), max_new_tokens=max_new,
                               stop_ids=stop_ids))


def dense_embeddings(model: Model, inputs) -> np.ndarray:
    """The embeddings reference: one dense forward per input, its final hidden states
    mean-pooled and L2-normalised -> float32 [n, d]."""
    out = np.empty((len(inputs), model.config.hidden_size), dtype=np.float32)
    for i, ids in enumerate(inputs):
        pooled = llama.hidden_states(model.config, model.weights, list(ids)).mean(axis=0)   # [T, d] -> [d]
        out[i] = pooled / np.linalg.norm(pooled)
    return out


def run_to_completion(engine, max_steps: int = 10_000) -> dict[int, list]:
    """Step until idle; collect every TokenOut per request id."""
    outs: dict[int, list] = {}
    for _ in range(max_steps):
        if not engine.has_work():
            return outs
        for out in engine.step():
            outs.setdefault(out.id, []).append(out)
    raise AssertionError("engine did not finish")


def run_embeddings(engine, inputs, max_steps: int = 1000):
    """Queue one embeddings job, step until it is done; its vectors [n, d]."""
    job = engine.add_embedding(inputs)
    done = []
    for _ in range(max_steps):
        engine.step()
        done += engine.take_embeddings()
        if done:
            break
    assert [d.job_id for d in done] == [job]
    return done[0].vectors


def tokens_of(outs) -> list[int]:
    return [o.token for o in outs]
