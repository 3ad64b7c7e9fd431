"""Gemma 3 270M served over HTTP, against Hugging Face's greedy continuations.

The evidence: the real GGUF (fetched once by `fetch-model gemma-3-270m`, like smol),
its own vocabulary read by the server, `/v1/completions` at temperature 0 with the oracle's
raw-text prompts (../shared/oracle/families/gemma3-270m/greedy.jsonl: transformers in
float32 on the dequantized GGUF, BOS added by the tokenizer). Tokens are compared up to the
first step whose top1-top2 logit margin is below MARGIN_TOLERANCE (the README's advice): a
closer call may go either way in float32.
"""
from __future__ import annotations

import json

import pytest
import requests

from tests.e2e.helpers import post, running_server
from tests.oracle import ORACLE_DIR, REPO_ROOT

pytestmark = pytest.mark.real_model

GREEDY = ORACLE_DIR / "families" / "gemma3-270m" / "greedy.jsonl"
MARGIN_TOLERANCE = 1e-2


@pytest.fixture(scope="module")
def gemma_server():
    from cli.fetch import GEMMA, ensure_model
    folder = ensure_model(REPO_ROOT / GEMMA.default_dest, model=GEMMA.name)
    with running_server(folder) as handle:
        yield handle


def _sure_steps(row: dict) -> int:
    """How many leading output tokens are decided by more than MARGIN_TOLERANCE."""
    for k, margin in enumerate(row["step_top1_top2_logit_margin"]):
        if margin < MARGIN_TOLERANCE:
            return k
    return len(row["output_ids"])


def test_completions_at_temperature_zero_are_hugging_faces_greedy_tokens(gemma_server):
    rows = [json.loads(line) for line in GREEDY.read_text(encoding="utf-8").splitlines()]
    model = requests.get(gemma_server.http_url + "/v1/models", timeout=30).json()["data"][0]["id"]
    for row in rows:
        answer = post(gemma_server, "/v1/completions", {
            "model": model, "prompt": row["prompt"], "max_tokens": row["max_new_tokens"],
            "temperature": 0}).json()
        text = answer["choices"][0]["text"]
        assert answer["usage"]["prompt_tokens"] == row["n_prompt_tokens"]      # BOS included
        sure = _sure_steps(row)
        if sure == len(row["output_ids"]):
            assert text == row["output_text"], row["index"]
        else:                               # the server's own detokenizer for the sure part
            sure_text = post(gemma_server, "/v1/detokenize", {
                "model": model, "tokens": row["output_ids"][:sure]}).json()["prompt"]
            assert text.startswith(sure_text), row["index"]


def test_tokenize_adds_bos_to_a_raw_prompt_as_vllm_does(gemma_server):
    model = requests.get(gemma_server.http_url + "/v1/models", timeout=30).json()["data"][0]["id"]
    row = json.loads(GREEDY.read_text(encoding="utf-8").splitlines()[0])
    with_bos = post(gemma_server, "/v1/tokenize", {"model": model, "prompt": row["prompt"]})
    assert with_bos.json()["tokens"] == row["prompt_ids"]          # BOS (2) first
    plain = post(gemma_server, "/v1/tokenize", {"model": model, "prompt": row["prompt"],
                                                "add_special_tokens": False})
    assert plain.json()["tokens"] == row["prompt_ids"][1:]
