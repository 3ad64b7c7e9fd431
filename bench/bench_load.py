"""Benchmark: load smol-135m from its GGUF into ready float32 arrays (target <= 3 s).

Run from the repository root:  python bench/bench_load.py [--repeat N] [MODEL_PATH]

Reports, for each run, the two phases a server start pays:
  * weights: open + parse the GGUF, dequantize (Q4_1/Q8_0 -> float32), undo the Q/K
    permutation, fuse QKV and gate|up, lay everything out input-major;
  * full: `engine.model.loader.load_model` (the above plus the BPE tokenizer and chat template).
The machine must be quiet: two cores are shared with everything else.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli.fetch import DEFAULT_DEST, GGUF_NAME, ensure_model  # noqa: E402
from engine.formats.gguf import GGUFFile  # noqa: E402
from engine.model.families import gguf_qk_permuted  # noqa: E402
from engine.model.loader import load_model  # noqa: E402
from engine.model.weights import GGUF_NAMES, TensorSource, build_weights, config_from_gguf  # noqa: E402

TARGET_S = 3.0


def load_weights_only(path: Path) -> float:
    start = time.perf_counter()
    gguf = GGUFFile(path)
    config = config_from_gguf(gguf.metadata, gguf.path, 0)
    source = TensorSource(path=gguf.path, shapes={n: t.shape for n, t in gguf.tensors.items()},
                          get=gguf.tensor, get_input_major=gguf.matrix_input_major,
                          role_names=GGUF_NAMES, is_gguf_permuted=gguf_qk_permuted(config.options))
    build_weights(source, config)
    return time.perf_counter() - start


def load_full(path: Path) -> float:
    start = time.perf_counter()
    load_model(path)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    path = Path(args.model) if args.model else ensure_model(REPO / DEFAULT_DEST) / GGUF_NAME
    for name, fn in (("weights", load_weights_only), ("full", load_full)):
        times_s = [fn(path) for _ in range(args.repeat)]
        print(f"{name:8s} best {min(times_s):.2f} s  median {statistics.median(times_s):.2f} s"
              f"  ({', '.join(f'{t:.2f}' for t in times_s)})")
    verdict = "OK" if min(times_s) <= TARGET_S else "OVER"
    print(f"model load (full) target <= {TARGET_S:.0f} s: {verdict}  [{path}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
