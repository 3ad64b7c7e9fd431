"""The dense model on the real SmolLM2-135M against Hugging Face's numbers (the oracle).

Oracle files (../shared/oracle, see its README): `logits_0.npy` / `logits_1.npy` are the
last-position logits of the first two `hf_greedy.jsonl` prompts; `hf_greedy.jsonl` holds
greedy continuations (48 new tokens max, EOS 2); `embeddings.jsonl` holds mean-pooled,
L2-normalised final hidden states.
"""
from __future__ import annotations


import numpy as np
import pytest

from engine.model import llama
from tests.engine.core.engine_models import run_embeddings
from tests.oracle import ORACLE_DIR, read_jsonl

LOGITS_TOLERANCE = 1e-3
EMBEDDING_MIN_COSINE = 0.9999
GREEDY_MAX_NEW_TOKENS = 48
HF_EOS_ID = 2

pytestmark = pytest.mark.real_model


GREEDY_CASES = read_jsonl("hf_greedy.jsonl")
EMBEDDING_CASES = read_jsonl("embeddings.jsonl")


@pytest.fixture(scope="module")
def smol(real_model):
    return real_model


@pytest.mark.parametrize("index", [0, 1])
def test_last_position_logits_match_the_oracle(smol, index):
    want = np.load(ORACLE_DIR / f"logits_{index}.npy")
    ids = GREEDY_CASES[index]["prompt_ids"]
    cache = llama.DenseCache(smol.config, len(ids))
    last = llama.forward_cached(smol.config, smol.weights, ids, cache)[0]   # [V]
    assert last.shape == want.shape and last.dtype == np.float32
    assert float(np.max(np.abs(last - want))) <= LOGITS_TOLERANCE


def test_full_forward_agrees_with_the_oracle_and_the_cached_prefill(smol):
    ids = GREEDY_CASES[1]["prompt_ids"]
    logits = llama.forward(smol.config, smol.weights, ids)                                               # [n, V]
    assert logits.shape == (len(ids), smol.config.vocab_size)
    assert float(np.max(np.abs(logits[-1] - np.load(ORACLE_DIR / "logits_1.npy")))) <= LOGITS_TOLERANCE
    # every earlier position's argmax is a real next-token prediction: it must match the
    # dense cached path row for row
    cache = llama.DenseCache(smol.config)
    rows = llama.forward_cached(smol.config, smol.weights, ids, cache, last_only=False)
    np.testing.assert_allclose(rows, logits, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("case", GREEDY_CASES, ids=lambda c: f"{c['index']}-{c['id']}")
def test_greedy_continuation_matches_hugging_face(smol, case):
    got = list(llama.generate(smol.config, smol.weights, case["prompt_ids"],
                              max_new_tokens=GREEDY_MAX_NEW_TOKENS, stop_ids=(HF_EOS_ID,)))
    assert got == case["output_ids"]


@pytest.mark.parametrize("case", EMBEDDING_CASES, ids=lambda c: c["text"][:20])
def test_mean_pooled_embedding_matches_the_oracle(smol, case):
    hidden = llama.hidden_states(smol.config, smol.weights, case["ids"])                                 # [n, d]
    assert hidden.shape == (len(case["ids"]), smol.config.hidden_size)
    pooled = hidden.mean(axis=0, dtype=np.float64)                           # [d]
    pooled /= np.linalg.norm(pooled)
    want = np.asarray(case["embedding"], dtype=np.float64)
    cosine = float(pooled @ want / np.linalg.norm(want))
    assert cosine >= EMBEDDING_MIN_COSINE


@pytest.mark.parametrize("index", [0, 4])
def test_offline_generator_prints_the_hugging_face_answer(smol, index):
    from engine.api import SamplingParams
    from cli.generate import generate_text, served_model
    case = GREEDY_CASES[index]
    assert case["finish"] == "eos"
    assert smol.tokenizer.encode(case["prompt_text"]) == case["prompt_ids"]
    pieces = list(generate_text(served_model(smol), case["prompt_text"],
                                max_tokens=GREEDY_MAX_NEW_TOKENS,
                                params=SamplingParams(temperature=0.0), seed=0))
    assert "".join(pieces) == case["output_text"]


def test_generate_command_prints_the_chat_templated_greedy_answer(real_model_dir):
    import io
    from cli.generate import main
    case = GREEDY_CASES[0]
    out = io.StringIO()
    code = main(["--model-dir", str(real_model_dir), "--prompt", case["messages"][0]["content"],
                 "--temperature", "0", "--max-tokens", str(GREEDY_MAX_NEW_TOKENS)], out=out)
    assert code == 0
    assert out.getvalue() == case["output_text"] + "\n"


def test_embeddings_packed_into_engine_steps_match_the_oracle(smol):
    """The server's path: inputs as prefill-only rows in 5-token pieces, beside each other."""
    from engine.api import EngineConfig
    from engine.core.engine import Engine
    engine = Engine(smol, EngineConfig(block_size=4, num_kv_blocks=64, prefill_chunk=5,
                                       max_batched_tokens=12))
    vectors = run_embeddings(engine, [case["ids"] for case in EMBEDDING_CASES])
    for vector, case in zip(vectors, EMBEDDING_CASES):
        want = np.asarray(case["embedding"], dtype=np.float64)
        cosine = float(vector.astype(np.float64) @ want / np.linalg.norm(want))
        assert cosine >= EMBEDDING_MIN_COSINE
    assert engine.stats().kv_blocks_used == 0
