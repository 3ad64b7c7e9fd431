"""Bit-unpacking helpers shared by the dequantizers of engine/formats/quants*.py.

Every GGML block format is a few float16 scales next to small integer codes packed into
bytes: nibbles, 2-bit crumbs, single high bits. These helpers unpack one such field for
*all* blocks of a tensor at once (arrays are `[nb, ...]`, nb = number of blocks), so a
dequantizer is a handful of whole-array numpy operations and never loops over blocks.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

QK_K = 256                  # values per K-quant super-block

Dequantizer = Callable[[np.ndarray], np.ndarray]    # uint8 [nb, type_size] -> f32 [nb, block]

CRUMB_SHIFTS = np.arange(0, 8, 2, dtype=np.uint8)   # the four 2-bit fields of a byte
BIT_SHIFTS = np.arange(8, dtype=np.uint8)           # the eight bits of a byte


def f16_column(col: np.ndarray) -> np.ndarray:
    """uint8 [nb, 2] (little-endian half) -> float32 [nb, 1]."""
    return np.ascontiguousarray(col).view("<f2").astype(np.float32)


def split_nibbles(qs: np.ndarray, group: int) -> np.ndarray:
    """uint8 [nb, k*group] -> uint8 [nb, k, 2*group]: per group, low nibbles then high."""
    nb = qs.shape[0]
    q = qs.reshape(nb, -1, group)                       # [nb, k, group]
    out = np.empty((nb, q.shape[1], 2 * group), dtype=np.uint8)
    np.bitwise_and(q, 0x0F, out=out[:, :, :group])
    np.right_shift(q, 4, out=out[:, :, group:])
    return out


def split_crumbs(qs: np.ndarray, group: int) -> np.ndarray:
    """uint8 [nb, k*group] -> uint8 [nb, k, 4, group]: per group of bytes, bits 0-1, 2-3, 4-5, 6-7.

    The 2-bit K-quants store 128 values in 32 bytes this way: run r of 32 values is the
    r-th 2-bit field of the same 32 bytes.
    """
    q = qs.reshape(qs.shape[0], -1, 1, group)           # [nb, k, 1, group]
    return (q >> CRUMB_SHIFTS[:, None]) & 0x03          # [nb, k, 4, group]


def bit_planes(mask: np.ndarray) -> np.ndarray:
    """uint8 [nb, n] -> uint8 [nb, 8, n]: plane j holds bit j of every byte."""
    return (mask[:, None, :] >> BIT_SHIFTS[:, None]) & 0x01
