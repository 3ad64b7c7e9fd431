"""Benchmark of the dense reference model (engine/model/llama.py) beside the numpy roofline.

Runs `../shared/tools/roofline.py` first (a subprocess, in this same session, never at the
same time as our own timing), then on the real smol-135m:

* prefill: one 512-token prompt through the contiguous cache, logits for the last row
  only (tokens per second; target >= 250 tok/s);
* decode: one batch-1 step with a warm cache (ms; target <= 1.25x the roofline's batch-1
  step).

Prints a table, then one JSON line per case. Usage:
    python bench/bench_model.py [--model-dir DIR] [--repeats N] [--skip-roofline]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.model import llama            # noqa: E402
from cli.fetch import DEFAULT_DEST         # noqa: E402
from engine.model.loader import load_model         # noqa: E402
from roofline import run_roofline            # noqa: E402

PREFILL_TOKENS = 512
DECODE_CONTEXT_TOKENS = 128                   # cache length when the timed decode steps run
PREFILL_TARGET_TOK_S = 250.0
DECODE_TARGET_RATIO = 1.25


def time_prefill(loaded, ids: np.ndarray, repeats: int) -> float:
    """Median seconds for one whole-prompt prefill (last-row logits only)."""
    times = []
    for _ in range(repeats):
        cache = llama.DenseCache(loaded.config, len(ids) + 1)
        t0 = time.perf_counter()
        llama.forward_cached(loaded.config, loaded.weights, ids, cache)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_decode(loaded, ids: np.ndarray, steps: int) -> float:
    """Median seconds of one batch-1 decode step after a warm cache of len(ids) tokens."""
    cache = llama.DenseCache(loaded.config, len(ids) + steps + 1)
    logits = llama.forward_cached(loaded.config, loaded.weights, ids, cache)
    times = []
    for _ in range(steps):
        token = int(np.argmax(logits[0]))
        t0 = time.perf_counter()
        logits = llama.forward_cached(loaded.config, loaded.weights, [token], cache)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=str(REPO / DEFAULT_DEST))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-roofline", action="store_true")
    args = parser.parse_args(argv)

    roofline = {} if args.skip_roofline else run_roofline()
    loaded = load_model(args.model_dir)
    rng = np.random.default_rng(0)
    prompt = rng.integers(3, loaded.config.vocab_size, PREFILL_TOKENS)
    time_prefill(loaded, prompt[:32], 1)                                   # warm up BLAS
    prefill_s = time_prefill(loaded, prompt, args.repeats)
    decode_s = time_decode(loaded, prompt[:DECODE_CONTEXT_TOKENS], 5 * args.repeats)

    roof_ms = roofline[1].step_ms if 1 in roofline else None
    roof_best_tok_s = max((step.tok_s for step in roofline.values()), default=None)
    cases = [
        {"case": "prefill_512", "tokens": PREFILL_TOKENS, "ms": prefill_s * 1e3,
         "tok_per_s": PREFILL_TOKENS / prefill_s, "target_tok_per_s": PREFILL_TARGET_TOK_S,
         "roofline_best_batch_tok_per_s": roof_best_tok_s,
         "meets_target": PREFILL_TOKENS / prefill_s >= PREFILL_TARGET_TOK_S},
        {"case": "decode_b1", "context_tokens": DECODE_CONTEXT_TOKENS, "ms": decode_s * 1e3,
         "tok_per_s": 1.0 / decode_s, "roofline_b1_ms": roof_ms,
         "ratio_to_roofline": (decode_s * 1e3 / roof_ms) if roof_ms else None,
         "target_ratio": DECODE_TARGET_RATIO,
         "meets_target": (decode_s * 1e3 / roof_ms <= DECODE_TARGET_RATIO) if roof_ms else None},
    ]
    print()
    print(f"{'case':<14}{'ms':>10}{'tok/s':>10}{'roofline b1 ms':>16}{'ratio':>8}")
    for c in cases:
        ratio = c.get("ratio_to_roofline")
        print(f"{c['case']:<14}{c['ms']:>10.1f}{c['tok_per_s']:>10.1f}"
              f"{(roof_ms or float('nan')):>16.1f}{(ratio if ratio else float('nan')):>8.2f}")
    if roof_best_tok_s:
        print(f"(roofline best batched throughput: {roof_best_tok_s:.1f} tok/s)")
    for c in cases:
        print(json.dumps(c))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
