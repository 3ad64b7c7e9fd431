"""Structured outputs on smol-135m: throughput with a JSON Schema vs without, compile time,
and the memory of the vocabulary table (structured outputs' targets).

Cases, in one run:
  schema_N / free_N   N streams (1 and 16) at temperature 0.7, the same prompts and seeds,
                      with a typical pydantic schema, then without one  target: schema >= 0.8x
  compile_ms          first-use compile of that schema (a fresh cache)  target < 100 ms
  table               build time and bytes of the vocabulary table and its trie
  deep_array_ms       compile of an array schema nested MAX_SCHEMA_DEPTH deep (the limit;
                      it must stay fast: the compile runs on the server's loop thread)

What the throughput counts: generated tokens per second of `Engine.step()` wall time, from
the first step to the last (prefill included), for one fresh engine per run. Both runs
generate the same number of tokens per stream: `ignore_eos` keeps free streams going, but a
grammar ends its stream where the JSON is complete, so the schema run goes first and each
free stream then gets its schema twin's length as `max_tokens` (same batch size step by
step; otherwise the schema run's short streams leave a tail of small batches and the ratio
measures that, not the constraint). The schema run pays everything the server pays per
request: the mask builds of a cold mask cache, the first draws refused, the redraws. Only
the vocabulary table, built once per process (timed on its own line), is built before the
clock starts.

Usage (quiet machine):   python bench/structured.py            # up to 128 tokens per stream
                         python bench/structured.py --quick    # up to 24 tokens, a smoke run
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.api import (MAX_SCHEMA_DEPTH, Engine, EngineConfig, GenRequest, GrammarCache,  # noqa: E402
                        SamplingParams, load_model, schema_spec)

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


def run(model, max_tokens: list[int], grammar) -> tuple[float, list[int]]:
    """One stream per entry of `max_tokens` (seed = its index) -> (tokens/s, tokens per stream)."""
    engine = Engine(model, EngineConfig(max_num_seqs=max(len(max_tokens), 1)))
    engine.guides.table                                  # once per process in a server: not timed here
    prompt = tuple(model.tokenizer.encode("Describe a user as JSON with name, age, role, address, tags."))
    ids = [engine.add_request(GenRequest(prompt=prompt, params=SamplingParams(temperature=0.7, ignore_eos=True),
                                         seed=seed, max_tokens=n, grammar=grammar))
           for seed, n in enumerate(max_tokens)]
    produced = dict.fromkeys(ids, 0)
    start = time.perf_counter()
    while engine.has_work():
        for out in engine.step():
            produced[out.id] += 1
    elapsed_s = time.perf_counter() - start
    return sum(produced.values()) / elapsed_s, [produced[i] for i in ids]


def deep_array(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth - 1):
        schema = {"type": "array", "items": schema}
    return schema


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    max_tokens = 24 if args.quick else 128
    model = load_model(MODEL)
    start = time.perf_counter()
    grammar = GrammarCache().get(schema_spec(SCHEMA))
    rows = [("compile_ms", round((time.perf_counter() - start) * 1e3, 2), "target < 100")]
    start = time.perf_counter()
    GrammarCache().get(schema_spec(deep_array(MAX_SCHEMA_DEPTH)))
    rows.append(("deep_array_ms", round((time.perf_counter() - start) * 1e3, 2), f"depth {MAX_SCHEMA_DEPTH}"))
    engine = Engine(model, EngineConfig(max_num_seqs=1))
    start = time.perf_counter()
    table = engine.guides.table
    rows.append(("table_build_s", round(time.perf_counter() - start, 3), ""))
    rows.append(("table_mib", round(table.nbytes() / 2**20, 2), ""))
    for streams in (1, 16):
        guided, lengths = run(model, [max_tokens] * streams, grammar)
        free, free_lengths = run(model, lengths, None)
        assert free_lengths == lengths, (free_lengths, lengths)
        rows += [(f"free_{streams}_tok_s", round(free, 1), ""), (f"schema_{streams}_tok_s", round(guided, 1), ""),
                 (f"ratio_{streams}", round(guided / free, 3), "target >= 0.8"),
                 (f"tokens_{streams}", sum(lengths), f"per stream {min(lengths)}..{max(lengths)}")]
    for name, value, target in rows:
        print(f"{name:<18} {value:>10} {target}")
    print(json.dumps({name: value for name, value, _ in rows}))


if __name__ == "__main__":
    main()
