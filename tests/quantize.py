"""The two small quantizers the tests write GGUF test models with (Q8_0, Q4_1), plus F32/F16.

They are the inverse of `engine/formats/quants.py`'s dequantizers for these layouts and
live here because only tests (and their model writers) quantize: the engine only reads.

    Q8_0  [d:f16][q:int8 x32]          d = max|x| / 127, q = round(x / d), halves away from 0
    Q4_1  [d:f16][m:f16][nibbles x16]  m = min x, d = (max - m) / 15, q = round((x - m) / d)
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Q4_1_LEVELS = 15            # largest 4-bit code
Q8_0_LEVELS = 127           # largest |int8| code


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's roundf: halves go away from zero (numpy's rint rounds them to even)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize_q8_0(values: np.ndarray) -> np.ndarray:
    """float32 [n] (n % 32 == 0) -> Q8_0 bytes uint8 [n / 32 * 34]."""
    x = np.asarray(values, np.float32).reshape(-1, 32)  # [nb, 32]
    d = np.abs(x).max(axis=1, keepdims=True) / Q8_0_LEVELS
    d16 = d.astype(np.float16)
    inv = np.divide(1.0, d16.astype(np.float32), out=np.zeros_like(d), where=d16 != 0)
    q = np.clip(_round_half_away(x * inv), -Q8_0_LEVELS, Q8_0_LEVELS).astype(np.int8)
    return np.concatenate([d16.view(np.uint8), q.view(np.uint8)], axis=1).reshape(-1)


def quantize_q4_1(values: np.ndarray) -> np.ndarray:
    """float32 [n] (n % 32 == 0) -> Q4_1 bytes uint8 [n / 32 * 20].

    Codes are chosen against the float16-rounded scale and minimum that dequantization
    will actually use, so the round trip error stays within half a step.
    """
    x = np.asarray(values, np.float32).reshape(-1, 32)  # [nb, 32]
    lo = x.min(axis=1, keepdims=True).astype(np.float16)
    hi = x.max(axis=1, keepdims=True)
    d16 = ((hi - lo.astype(np.float32)) / Q4_1_LEVELS).astype(np.float16)
    d = d16.astype(np.float32)
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.clip(np.floor((x - lo.astype(np.float32)) * inv + 0.5), 0, Q4_1_LEVELS)
    q = q.astype(np.uint8)                               # [nb, 32]
    packed = q[:, :16] | (q[:, 16:] << 4)                # [nb, 16]
    return np.concatenate([d16.view(np.uint8), lo.view(np.uint8), packed], axis=1).reshape(-1)


QUANTIZERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "F32": lambda x: np.ascontiguousarray(x, "<f4").reshape(-1).view(np.uint8),
    "F16": lambda x: np.ascontiguousarray(x, "<f2").reshape(-1).view(np.uint8),
    "Q8_0": quantize_q8_0,
    "Q4_1": quantize_q4_1,
}
