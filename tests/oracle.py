"""Where the reference data lives and how to read it, for every test.

`../shared/oracle/` sits beside the repository (for developers and for CI) and holds what
Hugging Face transformers/tokenizers and Jinja2 produced; the tests match it exactly.
"""
from __future__ import annotations

import json
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT / ".." / "shared"
ORACLE_DIR = SHARED_DIR / "oracle"
HF_DIR = ORACLE_DIR / "smol-135m-hf"      # SmolLM2's tokenizer/config files, no weights


def read_jsonl(name: str) -> list[dict]:
    """Every record of `ORACLE_DIR/name`, one JSON document per non-blank line."""
    with open(ORACLE_DIR / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
