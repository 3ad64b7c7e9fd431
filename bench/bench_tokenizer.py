"""Tokenizer encode/decode throughput on ~1 MB of mixed English and code.

    python bench/bench_tokenizer.py [--mb 1.0] [--repeat 3]

The text is built deterministically: English prose (the project's spec and design notes,
the oracle's texts and rendered chat prompts) interleaved with code (this repository's own
.py files, in sorted order), cycled until the target size. Target: encode >= 1 MB/s.

"cold" is the first pass of a freshly loaded tokenizer (every new word goes through BPE
merges); "warm" repeats the pass with the word cache filled, the steady state of a server.
Prints one line per measurement and a final JSON line for scripts.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from cli.fetch import DEFAULT_DEST, GGUF_NAME  # noqa: E402
from engine.tokenizer import BPETokenizer  # noqa: E402

SHARED_DIR = REPO_ROOT / ".." / "shared"
HF_DIR = SHARED_DIR / "oracle" / "smol-135m-hf"
GGUF_PATH = REPO_ROOT / DEFAULT_DEST / GGUF_NAME
BYTES_PER_MB = 1_000_000
TARGET_ENCODE_MB_PER_S = 1.0
# Files skipped when gathering code: virtual environments and downloaded artifacts.
SKIPPED_DIRS = {".venv", "artifacts", ".git", "build", "__pycache__"}


def english_documents() -> list[str]:
    docs = [p.read_text(encoding="utf-8") for p in sorted(SHARED_DIR.glob("spec/*.txt"))]
    docs += [p.read_text(encoding="utf-8") for p in sorted(SHARED_DIR.glob("design/*.md"))]
    docs += [p.read_text(encoding="utf-8") for p in sorted(REPO_ROOT.glob("*.md"))]
    for name, key in (("tokenize_cases.jsonl", "text"), ("template_cases.jsonl", "rendered"),
                      ("hf_greedy.jsonl", "output_text")):
        path = SHARED_DIR / "oracle" / name
        if path.is_file():
            lines = path.read_text(encoding="utf-8").split("\n")  # texts hold U+2028
            values = [json.loads(line).get(key) for line in lines if line.strip()]
            docs.append("\n\n".join(dict.fromkeys(v for v in values if isinstance(v, str))))
    return [d for d in docs if d]


def code_documents() -> list[str]:
    paths = [p for p in sorted(REPO_ROOT.rglob("*.py"))
             if not SKIPPED_DIRS & set(p.relative_to(REPO_ROOT).parts)]
    return [p.read_text(encoding="utf-8") for p in paths]


def build_text(target_bytes: int) -> str:
    """English and code documents alternately, cycled, cut at target_bytes of UTF-8."""
    english, code = english_documents(), code_documents()
    sources = [docs for docs in (english, code) if docs]
    parts: list[str] = []
    size = 0
    turn = 0
    while size < target_bytes:
        docs = sources[turn % len(sources)]
        doc = docs[(turn // len(sources)) % len(docs)]
        parts.append(doc)
        size += len(doc.encode("utf-8"))
        turn += 1
    return "\n".join(parts).encode("utf-8")[:target_bytes].decode("utf-8", errors="ignore")


def load_tokenizer(source: str) -> BPETokenizer:
    if source == "gguf":
        from engine.formats.gguf import GGUFFile
        return BPETokenizer.from_gguf_metadata(GGUFFile(GGUF_PATH).metadata)
    config = json.loads((HF_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    return BPETokenizer.from_tokenizer_json(HF_DIR / "tokenizer.json", tokenizer_config=config)


def timed(fn):
    start_s = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0, help="text size in MB (10^6 bytes)")
    parser.add_argument("--repeat", type=int, default=3, help="warm passes (best is reported)")
    parser.add_argument("--source", choices=("tokenizer_json", "gguf"), default="tokenizer_json")
    args = parser.parse_args()

    text = build_text(int(args.mb * BYTES_PER_MB))
    num_mb = len(text.encode("utf-8")) / BYTES_PER_MB
    tokenizer, load_s = timed(lambda: load_tokenizer(args.source))
    ids, cold_s = timed(lambda: tokenizer.encode(text))
    warm_s = min(timed(lambda: tokenizer.encode(text))[1] for _ in range(max(1, args.repeat)))
    decoded, decode_s = timed(lambda: tokenizer.decode(ids))
    assert decoded == text, "decode(encode(text)) must round-trip"

    results = {
        "text_mb": round(num_mb, 3), "num_tokens": len(ids), "load_s": round(load_s, 3),
        "encode_cold_mb_per_s": round(num_mb / cold_s, 2),
        "encode_warm_mb_per_s": round(num_mb / warm_s, 2),
        "decode_mb_per_s": round(num_mb / decode_s, 2),
        "target_encode_mb_per_s": TARGET_ENCODE_MB_PER_S,
    }
    print(f"text: {num_mb:.3f} MB, {len(ids)} tokens ({args.source}, load {load_s:.2f} s)")
    print(f"encode cold: {results['encode_cold_mb_per_s']:.2f} MB/s   "
          f"warm: {results['encode_warm_mb_per_s']:.2f} MB/s   "
          f"(target >= {TARGET_ENCODE_MB_PER_S} MB/s)")
    print(f"decode:      {results['decode_mb_per_s']:.2f} MB/s")
    print(json.dumps(results))
    return 0 if results["encode_cold_mb_per_s"] >= TARGET_ENCODE_MB_PER_S else 1


if __name__ == "__main__":
    sys.exit(main())
