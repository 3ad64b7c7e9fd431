"""Prompt scoring on the real SmolLM2-135M against Hugging Face's last-position logits.

The oracle's `logits_<i>.npy` are the logits at the last prompt position of the first two
`hf_greedy.jsonl` prompts. Scoring `prompt + [first output token]` through the paged engine
(chunked prefill) reports that token's logprob and the top-20 at exactly that position:
both must equal the log-softmax of the oracle's logits to 1e-3.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.api import EngineConfig, GenRequest, MAX_TOP_LOGPROBS, PromptLogprobs
from engine.core.engine import Engine
from tests.engine.core.engine_models import run_to_completion
from tests.oracle import ORACLE_DIR, read_jsonl

LOGPROB_TOLERANCE = 1e-3

pytestmark = pytest.mark.real_model


@pytest.mark.parametrize("index", [0, 1])
def test_scored_last_position_equals_the_oracle_log_softmax(real_model, index):
    case = read_jsonl("hf_greedy.jsonl")[index]
    logits = np.load(ORACLE_DIR / f"logits_{index}.npy").astype(np.float64)      # [V]
    expected = logits - logits.max()
    expected -= np.log(np.exp(expected).sum())                                   # log-softmax [V]
    prompt = tuple(case["prompt_ids"]) + (case["output_ids"][0],)
    engine = Engine(real_model, EngineConfig(num_kv_blocks=64, prefill_chunk=24))
    rid = engine.add_request(GenRequest(prompt=prompt, max_tokens=0,
                                        prompt_logprobs=MAX_TOP_LOGPROBS))
    last = [o for o in run_to_completion(engine)[rid] if isinstance(o, PromptLogprobs)][-1]
    assert last.complete and last.tokens[-1] == case["output_ids"][0]
    assert abs(last.logprobs[-1] - expected[case["output_ids"][0]]) < LOGPROB_TOLERANCE
    top = last.top_logprobs[-1]
    best = np.argsort(-expected, kind="stable")[:MAX_TOP_LOGPROBS]
    assert len(top) == MAX_TOP_LOGPROBS
    np.testing.assert_allclose([lp for _, lp in top], expected[best], atol=LOGPROB_TOLERANCE)
    assert top[0][0] == int(best[0])
