"""Llama 3.2, Qwen2 and Qwen3 tiny models against Hugging Face's numbers, from both files.

Oracle: ../shared/oracle/families/<family>/ (see its README): small random models with the
real tokenizers, in a safetensors folder (`model/`) and a Q8_0 GGUF holding the same
numbers. `greedy.jsonl` holds greedy continuations of `prompt_ids` and the top1-top2 logit
margin of every step; `logits_<j>.npy` the last-position logits of `logits_cases.jsonl`.

Each family exercises one option of the shared decoder: llama32-tiny Llama 3 RoPE scaling
(config.json `rope_scaling`, or the GGUF's `rope_freqs` divisors), qwen2-tiny q/k/v biases
(GGUF rows not permuted), qwen3-tiny per-head q/k RMSNorm and an explicit head_dim.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from engine.api import EngineConfig, GenRequest, SpeculativeConfig
from engine.core.engine import Engine
from engine.model import llama
from engine.model.loader import load_model
from engine.model.spec import Model
from tests.engine.core.engine_models import GREEDY, run_to_completion, tokens_of
from tests.oracle import ORACLE_DIR

FAMILIES_DIR = ORACLE_DIR / "families"
FAMILIES = ("llama32-tiny", "qwen2-tiny", "qwen3-tiny")
SOURCES = ("folder", "gguf")
LOGITS_TOLERANCE = 1e-3           # README: float32 vs float64 differ by ~1e-5 here
# Tokens are compared up to the first step whose top1-top2 margin is below this: there
# float32 rounding may legitimately pick the other token.
MARGIN_TOLERANCE = 1e-3
# A paged engine with small blocks and prefill chunks, so every prompt crosses blocks and
# the long (>300 token) prompt is prefilled in several chunks.
PAGED = EngineConfig(block_size=8, num_kv_blocks=512, prefill_chunk=48)
# The same with prompt-lookup speculation: verification chunks of the last token + drafts.
SPECULATIVE = EngineConfig(block_size=8, num_kv_blocks=512, prefill_chunk=48,
                           speculative=SpeculativeConfig(num_speculative_tokens=4))


def _jsonl(family: str, name: str) -> list[dict]:
    with open(FAMILIES_DIR / family / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@functools.cache
def _model(family: str, source: str) -> Model:
    path = FAMILIES_DIR / family / ("model" if source == "folder" else f"{family}.Q8_0.gguf")
    return load_model(path)


def _trusted_prefix(case: dict) -> int:
    """How many output tokens are decided by a margin above MARGIN_TOLERANCE."""
    margins = case["step_top1_top2_logit_margin"]
    low = [k for k, m in enumerate(margins) if m < MARGIN_TOLERANCE]
    return low[0] if low else len(case["output_ids"])


def _assert_greedy_matches(got: list[int], case: dict) -> None:
    trusted = _trusted_prefix(case)
    assert got[:trusted] == case["output_ids"][:trusted], f"prompt {case['index']}"
    if trusted == len(case["output_ids"]):
        assert got == case["output_ids"], f"prompt {case['index']}"


PAIRS = [(f, s) for f in FAMILIES for s in SOURCES]


@pytest.mark.parametrize("family,source", PAIRS)
def test_last_position_logits_match_hugging_face(family, source):
    model = _model(family, source)
    for j, case in enumerate(_jsonl(family, "logits_cases.jsonl")):
        want = np.load(FAMILIES_DIR / family / f"logits_{j}.npy")            # [V]
        cache = llama.DenseCache(model.config, len(case["prompt_ids"]))
        got = llama.forward_cached(model.config, model.weights, case["prompt_ids"], cache)[0]
        assert got.shape == want.shape
        assert float(np.max(np.abs(got - want))) <= LOGITS_TOLERANCE, f"logits_{j}"


@pytest.mark.parametrize("family,source", PAIRS)
def test_dense_greedy_matches_hugging_face(family, source):
    model = _model(family, source)
    for case in _jsonl(family, "greedy.jsonl"):
        got = list(llama.generate(model.config, model.weights, case["prompt_ids"],
                                  max_new_tokens=case["max_new_tokens"],
                                  stop_ids=model.config.eos_token_ids))
        _assert_greedy_matches(got, case)


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_paged_engine_matches_hugging_face(family):
    """All prompts at once through the runner (paged KV, chunked prefill, decode mirror),
    twice: the second round reads the first round's prompts from the radix prefix cache.
    The family's options must reach the batched path, not only the dense reference."""
    model = _model(family, "gguf")
    cases = _jsonl(family, "greedy.jsonl")
    engine = Engine(model, PAGED)
    for round_index in range(2):
        ids = [engine.add_request(GenRequest(prompt=tuple(c["prompt_ids"]), params=GREEDY,
                                             max_tokens=c["max_new_tokens"])) for c in cases]
        outs = run_to_completion(engine)
        for rid, case in zip(ids, cases):
            _assert_greedy_matches(tokens_of(outs[rid]), case)
    # the >300-token prompt alone spans dozens of whole cached blocks
    assert engine.stats().prefix_hit_tokens >= PAGED.block_size * 40


@pytest.mark.parametrize("family", FAMILIES)
def test_speculative_engine_matches_hugging_face(family):
    """Greedy speculation must not change a token, whatever the family's options."""
    model = _model(family, "folder")
    cases = _jsonl(family, "greedy.jsonl")
    engine = Engine(model, SPECULATIVE)
    ids = [engine.add_request(GenRequest(prompt=tuple(c["prompt_ids"]), params=GREEDY,
                                         max_tokens=c["max_new_tokens"])) for c in cases]
    outs = run_to_completion(engine)
    for rid, case in zip(ids, cases):
        _assert_greedy_matches(tokens_of(outs[rid]), case)
    assert engine.stats().spec_draft_tokens > 0          # drafts were verified, not skipped


@pytest.mark.parametrize("family", FAMILIES)
def test_folder_and_gguf_load_the_same_decoder(family):
    """Both files hold identical numbers (README), so the loaded options and weights agree."""
    folder, gguf = _model(family, "folder"), _model(family, "gguf")
    assert folder.config.options.family == gguf.config.options.family
    assert folder.config.head_dim == gguf.config.head_dim
    for a, b in zip(folder.weights.layers, gguf.weights.layers):
        np.testing.assert_array_equal(a.wqkv, b.wqkv)
        for name in ("bqkv", "q_norm", "k_norm"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None) == (y is None), name
            if x is not None:
                np.testing.assert_array_equal(x, y)
