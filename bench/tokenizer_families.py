"""Measure each family's tokenizer against its oracle: tokenize x/40 and decode x/10.

Run from the repository root:  python bench/tokenizer_families.py [--gemma-gguf PATH]

For Gemma 3, Qwen2, Qwen3 and Llama 3 (../shared/oracle/families/), from tokenizer.json and
from the GGUF: how many tokenize cases give the reference ids both without and with special
tokens, and how many decode cases give the text, the text with specials skipped and each
id alone. References, where readers disagree (tests/engine/tokenizer/test_tokenizer_families.py says
why): tokenizer.json -> Hugging Face on that file (Gemma: the npm tokenizer.json's ids);
GGUF -> llama.cpp. A file that cannot be read is reported with the refusal. Also prints
the seconds to encode the oracle texts, cold. The tests assert the same numbers.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.tokenizer import TokenizerError  # noqa: E402
from tests.family_tokens import (  # noqa: E402
    GEMMA, GEMMA_GGUF, TINY_FAMILIES, family_jsonl, load_family_tokenizer, reference_ids)

FAMILIES = (GEMMA, *TINY_FAMILIES)


def measure(tokenizer, family: str, source: str) -> str:
    cases = family_jsonl(family, "tokenize_cases.jsonl")
    start_s = time.perf_counter()
    got = [(tokenizer.encode(c["text"]), tokenizer.encode(c["text"], add_special_tokens=True))
           for c in cases]
    encode_s = time.perf_counter() - start_s
    exact = sum(g == reference_ids(c, family, source) for g, c in zip(got, cases))
    decodes = family_jsonl(family, "decode_cases.jsonl")
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
                tokenizer = load_family_tokenizer(family, source, args.gemma_gguf)
            except (TokenizerError, OSError, ValueError) as error:
                print(f"{family:13} {source:4}  refused: {error}")
                continue
            print(f"{family:13} {source:4}  {measure(tokenizer, family, source)}")


if __name__ == "__main__":
    main()
