"""OpenBLAS's worker threads: how long they spin after a gemm before they sleep.

Why: the runner hands elementwise passes and the decode attention to one helper thread
(engine/core/runner.py) while the main thread does the other half. On a 2-core machine
that only pays if the second core is free; but after every gemm OpenBLAS's worker thread
keeps spinning on it for 2^28 cycles (~0.1 s, OpenBLAS's default) waiting for the next
gemm, and a step has ~120 gemms, so it never sleeps and the helper thread competes with a
busy loop. `OPENBLAS_THREAD_TIMEOUT` (read once, when the library loads) shortens the spin
to 2^20 cycles (~0.3 ms): long enough to bridge the short gaps between a layer's gemms,
short enough to free the core during the attention.

Measured side by side (docs/benchmarks.md, "Throughput at real concurrency"): 64
decoding streams, a step 188-208 ms -> 181-184 ms; 16 prompts on a cached 400-token prefix,
their step 1.19-1.21x the same prompts on a short prefix -> 1.14-1.15x; one stream
unchanged (24-28 ms a step either way).

It must be set before numpy is imported; an existing value (the operator's) wins.
"""
from __future__ import annotations

import os
import sys
from typing import MutableMapping

OPENBLAS_TIMEOUT_ENV = "OPENBLAS_THREAD_TIMEOUT"
SPIN_LOG2_CYCLES = 20            # OpenBLAS clamps the value to 4..30 (log2 of cycles)


def tune_blas_threads(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Shorten OpenBLAS's spin unless numpy is already loaded or the variable is set.
    Returns True when this call set it."""
    if "numpy" in sys.modules or OPENBLAS_TIMEOUT_ENV in environ:
        return False
    environ[OPENBLAS_TIMEOUT_ENV] = str(SPIN_LOG2_CYCLES)
    return True
