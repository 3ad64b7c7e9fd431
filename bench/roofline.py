"""Run the shared numpy roofline (`../shared/tools/roofline.py`) in this session and parse it.

Every speed target is a ratio to this bare float32 step (matmuls and norms, no attention, no
bookkeeping), so the benchmarks run it beside their own timing rather than quoting old
numbers: the two cores are shared and noisy.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOFLINE = Path(__file__).resolve().parents[1] / ".." / "shared" / "tools" / "roofline.py"
ROOFLINE_MAX_BATCH = 128          # the largest batch the roofline times
# "batch   16: step    62.1 ms  ->   257.7 tok/s  (...)"
STEP_LINE = re.compile(r"batch\s+(\d+): step\s+([\d.]+) ms\s+->\s+([\d.]+) tok/s")


@dataclass(frozen=True)
class RooflineStep:
    step_ms: float
    tok_s: float


def run_roofline(without_env: tuple[str, ...] = ()) -> dict[int, RooflineStep]:
    """batch size -> the roofline's step time and tokens/s; its output is echoed.

    `without_env`: variables this process set for itself that the roofline must not inherit
    (bench/closed_loop.py's OpenBLAS spin: the roofline stays the library's defaults)."""
    env = {k: v for k, v in os.environ.items() if k not in without_env}
    text = subprocess.run([sys.executable, str(ROOFLINE)], capture_output=True, text=True,
                          check=True, env=env).stdout
    print(text.rstrip())
    return {int(b): RooflineStep(float(ms), float(tok_s)) for b, ms, tok_s in STEP_LINE.findall(text)}
