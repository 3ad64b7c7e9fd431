"""Structured outputs on smol-135m: throughput with a JSON Schema vs without, compile time,
and the memory of the vocabulary table (issue 10's targets).

Cases, in one run:
  free_N / schema_N   N streams (1 and 16) at temperature 0.7, the same prompts and seeds,
                      without and with a typical pydantic schema    target: schema >= 0.8x
  compile_ms          first-use compile of that schema (a fresh cache)  target < 100 ms
  table               build time and bytes of the vocabulary table

Usage (quiet machine):   python bench/structured.py            # 128 tokens per stream
                         python bench/structured.py --quick    # 24 tokens, a smoke run
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.api import (Engine, EngineConfig, GenRequest, GrammarCache, SamplingParams,  # noqa: E402
                        load_model, schema_spec)

MODEL = ROOT / "artifacts" / "models" / "smol-135m"
SCHEMA = {  # what pydantic emits for a small nested model with an enum, a list and an optional
    "$defs": {"Address": {"properties": {"city": {"title": "City", "type": "string"},
                                         "zip": {"title": "Zip", "type": "integer"}},
                          "required": ["city", "zip"], "title": "Address", "type": "object"},
              "Role": {"enum": ["admin", "user", "guest"], "title": "Role", "type": "string"}},
    "properties": {"name": {"title": "Name", "type": "string"}, "age": {"title": "Age", "type": "integer"},
                   "role": {"$ref": "#/$defs/Role"}, "address": {"$ref": "#/$defs/Address"},
                   "tags": {"items": {"type": "string"}, "title": "Tags", "type": "array"},
                   "email": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
    "required": ["name", "age", "role", "address", "tags"], "title": "User", "type": "object"}


def tokens_per_s(model, streams: int, max_tokens: int, grammar) -> float:
    engine = Engine(model, EngineConfig(max_num_seqs=max(streams, 1)))
    prompt = tuple(model.tokenizer.encode("Describe a user as JSON with name, age, role, address, tags."))
    for seed in range(streams):
        engine.add_request(GenRequest(prompt=prompt, params=SamplingParams(temperature=0.7, ignore_eos=True),
                                      seed=seed, max_tokens=max_tokens, grammar=grammar))
    produced, start = 0, time.perf_counter()
    while engine.has_work():
        produced += len(engine.step())
    return produced / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    max_tokens = 24 if args.quick else 128
    model = load_model(MODEL)
    start = time.perf_counter()
    grammar = GrammarCache().get(schema_spec(SCHEMA))
    rows = [("compile_ms", round((time.perf_counter() - start) * 1e3, 2), "target < 100")]
    engine = Engine(model, EngineConfig(max_num_seqs=1))
    start = time.perf_counter()
    table = engine.guides.table
    rows.append(("table_build_s", round(time.perf_counter() - start, 3), ""))
    rows.append(("table_mib", round(table.nbytes() / 2**20, 2), ""))
    for streams in (1, 16):
        free = tokens_per_s(model, streams, max_tokens, None)
        guided = tokens_per_s(model, streams, max_tokens, grammar)
        rows += [(f"free_{streams}_tok_s", round(free, 1), ""), (f"schema_{streams}_tok_s", round(guided, 1), ""),
                 (f"ratio_{streams}", round(guided / free, 3), "target >= 0.8")]
    for name, value, target in rows:
        print(f"{name:<18} {value:>10} {target}")
    print(json.dumps({name: value for name, value, _ in rows}))


if __name__ == "__main__":
    main()
