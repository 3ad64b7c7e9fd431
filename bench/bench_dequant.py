"""Benchmark: dequantize a 10M-value tensor of each GGML type (both layouts the loader uses).

Run from the repository root:  python bench/bench_dequant.py [--values N] [--repeat R] [TYPE ...]

For each type, random blocks with finite scales (tests/quant_blocks.py) are dequantized
`R` times; the best time is reported for `dequantize` (output-major, flat) and for
`dequantize_input_major` (a [1024, N/1024] matrix laid out [in, out], as weights are).
With the `gguf` package installed, its reference dequantizer's time is shown beside.
The machine must be quiet: two cores are shared with everything else.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.formats.quants import GGML_TYPE_BY_NAME, dequantize, dequantize_input_major  # noqa: E402
from tests.quant_blocks import F16_SCALE_OFFSETS, random_blocks  # noqa: E402

DEFAULT_VALUES = 10_000_000
OUT_ROWS = 1024             # output dimension of the matrix timed input-major


def best_time_s(fn, repeat: int) -> float:
    times_s = []
    for _ in range(repeat):
        start_s = time.perf_counter()
        fn()
        times_s.append(time.perf_counter() - start_s)
    return min(times_s)


def reference_time_s(raw, name: str, repeat: int) -> float | None:
    try:
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import dequantize as reference
    except ImportError:
        return None
    return best_time_s(lambda: reference(raw, GGMLQuantizationType[name]), repeat)


def bench_type(name: str, num_values: int, repeat: int) -> str:
    gtype = GGML_TYPE_BY_NAME[name]
    in_dim = num_values // OUT_ROWS // gtype.block_size * gtype.block_size
    values = OUT_ROWS * in_dim
    raw = random_blocks(name, values // gtype.block_size, seed=0).reshape(-1)
    flat_s = best_time_s(lambda: dequantize(raw, gtype, values), repeat)
    major_s = best_time_s(lambda: dequantize_input_major(raw, gtype, OUT_ROWS, in_dim), repeat)
    ref_s = reference_time_s(raw, name, repeat)
    ref = "" if ref_s is None else f"   gguf-py {ref_s * 1e3:7.1f} ms"
    return (f"{name:7s} {values / 1e6:5.2f}M values: dequantize {flat_s * 1e3:7.1f} ms"
            f"   input-major {major_s * 1e3:7.1f} ms{ref}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("types", nargs="*", default=sorted(F16_SCALE_OFFSETS))
    parser.add_argument("--values", type=int, default=DEFAULT_VALUES)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name in args.types:
        print(bench_type(name, args.values, args.repeat), flush=True)


if __name__ == "__main__":
    main()
