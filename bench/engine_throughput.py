"""Engine throughput on smol-135m, next to the numpy roofline of the same session.

Cases (the engine's performance targets; 128 output tokens, ~64-token prompts):

  roofline       ../shared/tools/roofline.py, run first as a subprocess (bare float32 step)
  decode_1       one stream: decode tok/s               target >= 0.8x roofline batch 1
  batch_16/64    N streams at once: aggregate tok/s     target >= 0.8x roofline at N
  prefill_512    one 512-token prompt: prefill tok/s    target >= 250 tok/s
  prefix_shared  400-token system prompt: TTFT of a later request and of 16 arriving
                 together, vs the first (cold) one      target >= 5x faster
  prompt_lookup  extractive task (repeat a passage) with and without prompt-lookup
                 speculation: identical greedy output   target >= 1.8x tok/s

Prints a table and one JSON line per case. Usage (quiet machine, nothing else running):

    python bench/engine_throughput.py            # full
    python bench/engine_throughput.py --quick    # fewer tokens, batch 16 only
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.api import (Engine, EngineConfig, GenRequest, SamplingParams,  # noqa: E402
                        SpeculativeConfig, load_model, tune_malloc)
from cli.fetch import DEFAULT_DEST  # noqa: E402
from roofline import run_roofline  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)
PASSAGE = (
    "The lighthouse keeper climbed the narrow stairs every evening at dusk. He wound the "
    "clockwork, trimmed the wick and polished the great lens until it shone. Ships passing "
    "the rocky point at night trusted that light, and for forty years it never failed them. "
    "When the keeper finally retired, the village gathered on the cliff to thank him, and "
    "the children painted a picture of the tower with its beam sweeping across the sea.")


def prompt_ids(i: int, n: int, vocab: int = 49152) -> tuple[int, ...]:
    """A deterministic pseudo-random prompt of n ordinary tokens (ids 1000..)."""
    return tuple(1000 + (i * 7919 + j * 104729) % (vocab - 2000) for j in range(n))


def drive(engine: Engine, requests: list[GenRequest]) -> dict:
    """Add all requests at once and step to the end; time to first token per request."""
    t0 = time.perf_counter()
    ids = [engine.add_request(r) for r in requests]
    first, tokens, done = {}, {i: [] for i in ids}, 0
    while engine.has_work():
        outs = engine.step()
        now = time.perf_counter()
        for o in outs:
            if o.token is not None:
                tokens[o.id].append(o.token)
                first.setdefault(o.id, now - t0)
    wall = time.perf_counter() - t0
    done = sum(len(t) for t in tokens.values())
    return {"wall_s": wall, "tokens": done, "ttft_s": [first[i] for i in ids],
            "outputs": [tokens[i] for i in ids]}


def case_batch(model, n: int, out_tokens: int, roof: dict) -> dict:
    engine = Engine(model, EngineConfig(kv_cache_mib=1536, max_num_seqs=max(64, n)))
    reqs = [GenRequest(prompt=prompt_ids(i, 64), params=GREEDY, max_tokens=out_tokens) for i in range(n)]
    r = drive(engine, reqs)
    decode_s = r["wall_s"] - max(r["ttft_s"])
    decode_rate = (r["tokens"] - n) / decode_s if decode_s > 0 else 0.0
    rate = r["tokens"] / r["wall_s"]
    ref = roof[n].tok_s if n in roof else 0.0
    return {"case": f"batch_{n}" if n > 1 else "decode_1", "streams": n, "tok_s": round(rate, 1),
            "decode_tok_s": round(decode_rate, 1), "roofline_tok_s": ref,
            "ratio_decode_to_roofline": round(decode_rate / ref, 3) if ref else None,
            "ttft_max_s": round(max(r["ttft_s"]), 3)}


def case_prefill(model, n: int = 512) -> dict:
    engine = Engine(model)
    r = drive(engine, [GenRequest(prompt=prompt_ids(1, n), params=GREEDY, max_tokens=1)])
    return {"case": "prefill_512", "prompt_tokens": n, "ttft_s": round(r["wall_s"], 3),
            "prefill_tok_s": round(n / r["wall_s"], 1)}


def case_prefix(model, suffix: int, group: int = 16) -> dict:
    """A 400-token system prompt, then a user turn of `suffix` tokens per request."""
    engine = Engine(model)
    system = prompt_ids(99, 400)
    cold = drive(engine, [GenRequest(prompt=system + prompt_ids(0, suffix), params=GREEDY, max_tokens=1)])
    warm = drive(engine, [GenRequest(prompt=system + prompt_ids(1, suffix), params=GREEDY, max_tokens=1)])
    many = drive(engine, [GenRequest(prompt=system + prompt_ids(2 + i, suffix), params=GREEDY, max_tokens=1)
                          for i in range(group)])
    first = cold["ttft_s"][0]
    return {"case": f"prefix_shared_s{suffix}", "suffix_tokens": suffix, "first_ttft_s": round(first, 3),
            "later_ttft_s": round(warm["ttft_s"][0], 3), "speedup": round(first / warm["ttft_s"][0], 1),
            f"group{group}_max_ttft_s": round(max(many["ttft_s"]), 3),
            f"group{group}_speedup": round(first / max(many["ttft_s"]), 1),
            "prefix_hit_ratio": round(engine.stats().prefix_hit_ratio, 3)}


def extractive_prompt(model) -> tuple[int, ...]:
    text = ("<|im_start|>user\nRepeat the following passage word for word.\n\n" + PASSAGE +
            "<|im_end|>\n<|im_start|>assistant\n")
    return tuple(model.tokenizer.encode(text))


def case_prompt_lookup(model, out_tokens: int) -> dict:
    prompt = extractive_prompt(model)
    params = SamplingParams(temperature=0.0)
    results = {}
    for name, spec in (("plain", None), ("spec", SpeculativeConfig(num_speculative_tokens=8,
                                                                    prompt_lookup_min=2,
                                                                    prompt_lookup_max=4))):
        engine = Engine(model, EngineConfig(speculative=spec))
        r = drive(engine, [GenRequest(prompt=prompt, params=params, max_tokens=out_tokens)])
        decode_s = r["wall_s"] - r["ttft_s"][0]
        results[name] = (r, (r["tokens"] - 1) / decode_s if decode_s > 0 else 0.0, engine.stats())
    (plain, plain_rate, _), (spec, spec_rate, st) = results["plain"], results["spec"]
    return {"case": "prompt_lookup", "tokens": plain["tokens"], "plain_tok_s": round(plain_rate, 1),
            "spec_tok_s": round(spec_rate, 1), "speedup": round(spec_rate / plain_rate, 2),
            "identical": plain["outputs"] == spec["outputs"],
            "accepted": st.spec_accepted_tokens, "drafted": st.spec_draft_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="32 output tokens, batch 16 only")
    ap.add_argument("--no-roofline", action="store_true")
    ap.add_argument("--suffix-tokens", type=int, nargs="+", default=[4, 16],
                    help="user-turn lengths after the shared 400-token system prompt")
    args = ap.parse_args()
    roof = {} if args.no_roofline else run_roofline()
    tune_malloc()                   # as the server's start-up does
    model = load_model(ROOT / DEFAULT_DEST)
    out_tokens = 32 if args.quick else 128
    batches = (1, 16) if args.quick else (1, 16, 64)
    rows = [case_batch(model, n, out_tokens, roof) for n in batches]
    rows += [case_prefill(model)] + [case_prefix(model, n) for n in args.suffix_tokens]
    rows += [case_prompt_lookup(model, out_tokens)]
    print()
    for row in rows:
        print(f"{row['case']:<18} " + "  ".join(f"{k}={v}" for k, v in row.items() if k != "case"))
    print()
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
