"""Gemma 3 270M (the real GGUF) against Hugging Face's numbers, dense and paged.

Oracle: ../shared/oracle/families/gemma3-270m/ (see its README): transformers in float32 on
the dequantized GGUF. `logits_1` comes from a 724-token prompt, so the sliding window (512)
of the local layers is active; `greedy.jsonl` holds 32 greedy tokens of six prompts and
the top1-top2 margin of every step. The vocabulary is not read here (another room's work):
everything runs from `prompt_ids`, the model from `load_gguf_weights` (config and weights
without the tokenizer). The file comes from `fetch-model gemma-3-270m` (the fixture fetches
it once, like smol's `real_model_dir`).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.api import EngineConfig, GenRequest
from engine.core.engine import Engine
from engine.model import llama
from engine.model.loader import load_gguf_weights
from engine.model.spec import Model
from tests.engine.core.engine_models import GREEDY, run_to_completion, tokens_of
from tests.oracle import ORACLE_DIR, REPO_ROOT

pytestmark = pytest.mark.real_model

GEMMA_DIR = ORACLE_DIR / "families" / "gemma3-270m"
LOGITS_TOLERANCE = 1e-3           # README: float32 vs float64 differ by ~2e-5 here
MARGIN_TOLERANCE = 1e-2           # tokens are compared up to the first closer call
# Small blocks and chunks that do not divide 512: the window's edge falls inside blocks and
# inside chunks, and the 724-token prompt is prefilled in eight pieces.
PAGED = EngineConfig(block_size=16, num_kv_blocks=128, prefill_chunk=100, max_model_len=1024)
ENGINE_NEW_TOKENS = 8


@pytest.fixture(scope="module")
def gemma() -> Model:
    from cli.fetch import GEMMA, ensure_model
    folder = ensure_model(REPO_ROOT / GEMMA.default_dest, model=GEMMA.name)
    config, weights = load_gguf_weights(folder / GEMMA.gguf_name)
    return Model(name=GEMMA.name, config=config, weights=weights, tokenizer=None)


def _jsonl(name: str) -> list[dict]:
    with open(GEMMA_DIR / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_the_gguf_reads_as_gemma3_options(gemma):
    cfg = gemma.config
    assert (cfg.num_layers, cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads) \
        == (18, 640, 256, 4, 1)
    globals_ = [i for i in range(cfg.num_layers) if cfg.options.layer_window(i) is None]
    assert globals_ == [5, 11, 17] and cfg.options.sliding_window == 512
    assert [cfg.layer_rope_theta(i) for i in (4, 5)] == [10_000.0, 1_000_000.0]
    assert cfg.options.embed_scale == pytest.approx(640 ** 0.5)
    assert cfg.tie_word_embeddings and cfg.attn_scale == 1 / 16


def test_last_position_logits_match_hugging_face(gemma):
    for j, case in enumerate(_jsonl("logits_cases.jsonl")):
        want = np.load(GEMMA_DIR / f"logits_{j}.npy")                              # [V]
        hidden = llama.hidden_states(gemma.config, gemma.weights, case["prompt_ids"])
        got = llama.logits_from_hidden(gemma.weights, hidden[-1:])[0]               # [V]
        assert float(np.max(np.abs(got - want))) <= LOGITS_TOLERANCE, f"logits_{j}"


def test_dense_greedy_matches_hugging_face(gemma):
    for case in _jsonl("greedy.jsonl"):
        margins = case["step_top1_top2_logit_margin"]
        trusted = next((k for k, m in enumerate(margins) if m < MARGIN_TOLERANCE), len(margins))
        got = list(llama.generate(gemma.config, gemma.weights, case["prompt_ids"],
                                  max_new_tokens=trusted, stop_ids=case["stop_ids"]))
        assert got == case["output_ids"][:trusted], f"prompt {case['index']}"


def test_paged_engine_matches_dense_past_the_window(gemma):
    """The 724-token prompt through the runner (chunked prefill over small blocks, then
    decode rows through the mirror), twice: the second time from the prefix cache."""
    prompt = _jsonl("logits_cases.jsonl")[1]["prompt_ids"]
    assert len(prompt) > gemma.config.options.sliding_window
    want = list(llama.generate(gemma.config, gemma.weights, prompt,
                               max_new_tokens=ENGINE_NEW_TOKENS))
    engine = Engine(gemma, PAGED)
    for _ in range(2):
        rid = engine.add_request(GenRequest(prompt=tuple(prompt), params=GREEDY,
                                            max_tokens=ENGINE_NEW_TOKENS))
        assert tokens_of(run_to_completion(engine)[rid]) == want
    assert engine.stats().prefix_hit_tokens >= len(prompt) - PAGED.block_size


def test_the_gguf_alone_stops_at_end_of_turn_as_hugging_face_does():
    """The GGUF names `<eos>` (1) only; Gemma's generation_config (the oracle's stop ids) and
    llama.cpp also stop at `<end_of_turn>` (106), where every chat turn ends."""
    from cli.fetch import GEMMA, ensure_model
    from engine.api import load_model
    folder = ensure_model(REPO_ROOT / GEMMA.default_dest, model=GEMMA.name)
    model = load_model(folder)
    stop_ids = _jsonl("greedy.jsonl")[0]["stop_ids"]                           # [1, 106]
    assert model.tokenizer.token_to_id("<end_of_turn>") == 106
    assert sorted(model.config.eos_token_ids) == sorted(stop_ids)


def test_the_runner_past_the_window_matches_hugging_face_logits(gemma):
    """The 724-token prompt but its last token in 300-token chunks over 16-token blocks
    (the sliding layers gather only their windows' blocks, in query blocks of 256), then
    the last token as a decode row (the sliding layers slice the decode mirror to the
    window): its logits are Hugging Face's `logits_1`."""
    from engine.core.chunk import Chunk
    from engine.core.runner import ModelRunner
    from engine.kv.pools import KVCache
    prompt = _jsonl("logits_cases.jsonl")[1]["prompt_ids"]
    want = np.load(GEMMA_DIR / "logits_1.npy")                                      # [V]
    kv = KVCache(gemma.config, 48, 16)
    runner = ModelRunner(gemma.config, gemma.weights, kv, 1024, mirror_bytes=kv.nbytes)
    table = tuple(range(48))
    for start in range(0, len(prompt) - 1, 300):
        tokens = tuple(prompt[start:min(start + 300, len(prompt) - 1)])
        runner.forward([Chunk(tokens, start, table, num_logits=0, seq_id=0)])
    last = Chunk((prompt[-1],), len(prompt) - 1, table, num_logits=1, seq_id=0)
    got = runner.forward([last])[0]                                                 # [V]
    assert float(np.max(np.abs(got - want))) <= LOGITS_TOLERANCE
