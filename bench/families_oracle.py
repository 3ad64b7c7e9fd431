"""Measure each model family against Hugging Face: greedy x/8 and last-position logits.

Run from the repository root:  python bench/families_oracle.py [FAMILY ...]
(`gemma3-270m`, the real Gemma 3 GGUF of `fetch-model gemma-3-270m`, only when named: it
takes about a minute; its vocabulary is not read, so it is loaded without a tokenizer.)

For every family of ../shared/oracle/families/ with tiny models (llama32-tiny, qwen2-tiny,
qwen3-tiny), from its safetensors folder and from its GGUF: how many of the greedy.jsonl
continuations the dense forward reproduces token for token, and the max |diff| of the
last-position logits against each logits_<j>.npy. A file the loader refuses is reported
with the refusal. The tests (tests/engine/model/test_families_oracle.py) assert the same.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.errors import ModelFormatError  # noqa: E402
from engine.model import llama  # noqa: E402
from engine.model.loader import load_gguf_weights, load_model  # noqa: E402
from engine.model.spec import Model  # noqa: E402

FAMILIES_DIR = REPO / ".." / "shared" / "oracle" / "families"
TINY_FAMILIES = ("llama32-tiny", "qwen2-tiny", "qwen3-tiny")
GEMMA = "gemma3-270m"
GEMMA_GGUF = REPO / "artifacts" / "models" / "gemma-3-270m" / "gemma-3-270m-q4_k_m.gguf"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def greedy_matches(model, family_dir: Path) -> tuple[int, int]:
    """(continuations reproduced exactly, continuations)."""
    cases = _jsonl(family_dir / "greedy.jsonl")
    exact = 0
    for case in cases:
        got = list(llama.generate(model.config, model.weights, case["prompt_ids"],
                                  max_new_tokens=case["max_new_tokens"],
                                  stop_ids=case.get("stop_ids", model.config.eos_token_ids)))
        exact += got == case["output_ids"]
    return exact, len(cases)


def logits_diffs(model, family_dir: Path) -> list[float]:
    """max |ours - Hugging Face's| of the last-position logits, per logits case."""
    diffs = []
    for j, case in enumerate(_jsonl(family_dir / "logits_cases.jsonl")):
        want = np.load(family_dir / f"logits_{j}.npy")                     # [V]
        cache = llama.DenseCache(model.config, len(case["prompt_ids"]))
        got = llama.forward_cached(model.config, model.weights, case["prompt_ids"], cache)[0]
        diffs.append(float(np.max(np.abs(got - want))))
    return diffs


def main(families: list[str]) -> None:
    for family in families or TINY_FAMILIES:
        family_dir = FAMILIES_DIR / family
        sources = ((GEMMA_GGUF,) if family == GEMMA else
                   (family_dir / "model", family_dir / f"{family}.Q8_0.gguf"))
        for source in sources:
            label = f"{family:14s} {'gguf' if source.suffix == '.gguf' else 'folder':6s}"
            try:
                model = _gemma() if family == GEMMA else load_model(source)
            except ModelFormatError as e:
                print(f"{label} refused: {e.problem}")
                continue
            exact, total = greedy_matches(model, family_dir)
            diffs = ", ".join(f"{d:.1e}" for d in logits_diffs(model, family_dir))
            print(f"{label} greedy {exact}/{total}  logits max|diff| [{diffs}]", flush=True)


def _gemma() -> Model:
    config, weights = load_gguf_weights(GEMMA_GGUF)
    return Model(name=GEMMA, config=config, weights=weights, tokenizer=None)


if __name__ == "__main__":
    main(sys.argv[1:])
