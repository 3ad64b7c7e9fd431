"""A few rows times a weight matrix, in the shape OpenBLAS does fastest: `project(x, w)`.

Why: a decode step is memory-bound. One row (`x: [1, in]`) is a matrix-vector product that
streams the float32 weights once, at the memory's speed. Two to seven rows -- a sequence
verifying drafted tokens, or a few streams -- go to OpenBLAS's sgemm, which packs the weight
panel into its own layout on every call and pads the rows to its kernel's tile: measured
on this machine class (2 cores; 120 random float32 matrices of smol-135m's 30 layers' shapes
timed alone, best of 9), all of them cost 14 ms for 1 row, 30 ms for 2, 32 for 4, 46-57 for
5-6 and 29-32 for 8 (the engine's whole forward, shaped vs plain: `bench/step_rows.py
--plain`). A drafted row should be nearly free; sgemm made the second row cost more than
the first.

What this module does instead, per call (the answer is the same product):

* 2..`GEMV_ROWS_MAX` rows of a matrix that fits the cache (`GEMV_REREAD_BYTES_MAX`: a
  layer's matrices, 1-7 MiB on smol-135m): one matrix-vector product per row, in one numpy
  call (`x[:, None, :] @ w` broadcasts to a batch of [1, in] @ [in, out]). The first reads
  the weights from memory, the others find them in the cache: 19 ms for 2 rows, 23-29 for 3.
  Each row's result is bit for bit what it would be alone: the same gemv.
* otherwise below `PAD_ROWS_TO` rows: padded with zero rows to `PAD_ROWS_TO`, the tile
  sgemm runs fastest (29-32 ms for 8 rows where 5-7 rows took 38-57), the padding's
  results dropped. The LM head (113 MiB, tied) goes this way: re-reading it per row would
  read memory each time.
* otherwise (1 row, or a prefill's hundreds): `x @ w` as it is.

It is only a choice of shape: any row's values do not depend on the other rows.
"""
from __future__ import annotations

import numpy as np

# Up to this many rows, one gemv per row (the weights re-read from the cache) beats a gemm
# (at 4 rows the two were even, 38-48 ms, and padding to 8 is as fast).
GEMV_ROWS_MAX = 3

# A matrix up to this size is re-read from the cache by the second row's gemv; a larger one
# (the LM head) would be read from memory again.
GEMV_REREAD_BYTES_MAX = 16 * 1024 * 1024

# Other row counts below this are padded with zero rows up to it.
PAD_ROWS_TO = 8


def project(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w for activation rows x: [n, in] and weights w: [in, out] -> [n, out] float32."""
    rows = x.shape[0]
    if rows == 1 or rows >= PAD_ROWS_TO:
        return x @ w                                                 # gemv, or a real gemm
    if rows <= GEMV_ROWS_MAX and w.nbytes <= GEMV_REREAD_BYTES_MAX:
        return (x[:, None, :] @ w)[:, 0, :]                          # [n, 1, in] @ [in, out]
    padded = np.zeros((PAD_ROWS_TO, x.shape[1]), dtype=x.dtype)     # [8, in]
    padded[:rows] = x
    return (padded @ w)[:rows]                                       # [8, out] -> [n, out]
