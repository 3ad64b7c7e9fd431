"""GGML tensor types: block layouts and vectorised dequantizers.

A GGUF tensor is a run of *blocks*. Each block packs `block_size` values into `type_size`
bytes: a float16 scale (sometimes a minimum, sometimes 6-bit sub-scales) followed by small
integers. Dequantizing means `value = scale * q (+ min)` per block. This module turns the
raw bytes of a whole tensor into float32 in a handful of numpy operations over *all* blocks
at once -- never a Python loop per block -- because the real model has millions of blocks
and must load in about a second.

Exactness: each dequantizer performs the same float32 operations, in the same order, as
llama.cpp's reference (`d * q + m`, `(d * sc) * q - dmin * m`, ...), so its output is bit
for bit the reference output (`../shared/oracle/dequant_cases.json` checks this).

What it is not: a quantizer. The runtime only reads; the two small quantizers the tests
use to write GGUF test models (Q8_0, Q4_1) live in `tests/quantize.py`.

Block layouts (bytes, little-endian; `f16` is an IEEE half):

    Q8_0  [d:f16][q:int8 x32]                          value = d * q
    Q4_0  [d:f16][nibbles x16]                         value = d * (nibble - 8)
    Q4_1  [d:f16][m:f16][nibbles x16]                  value = d * nibble + m
    Q4_K  [d:f16][dmin:f16][scales:12][nibbles x128]   8 sub-blocks of 32, 6-bit sc/min
    Q5_K  [d][dmin][scales:12][high bits:32][nibbles x128]
    Q6_K  [low nibbles:128][high 2-bits:64][scales:int8 x16][d:f16]

In the 4-bit formats the low nibbles of a sub-block's bytes are its first half of values and
the high nibbles its second half.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

QK_K = 256                  # values per K-quant super-block
K_SCALE_BYTES = 12          # packed 6-bit (scale, min) pairs of the 8 sub-blocks of Q4_K/Q5_K

Dequantizer = Callable[[np.ndarray], np.ndarray]    # uint8 [nb, type_size] -> f32 [nb, block]


@dataclass(frozen=True)
class GGMLType:
    """One GGML tensor type: its id in the file, block geometry and dequantizer (or None)."""
    name: str
    type_id: int
    block_size: int         # values per block
    type_size: int          # bytes per block
    dequantize: Dequantizer | None

    def nbytes(self, num_values: int) -> int:
        return num_values // self.block_size * self.type_size


def _f16(col: np.ndarray) -> np.ndarray:
    """uint8 [nb, 2] (little-endian half) -> float32 [nb, 1]."""
    return np.ascontiguousarray(col).view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray, group: int) -> np.ndarray:
    """uint8 [nb, k*group] -> uint8 [nb, k, 2*group]: per group, low nibbles then high."""
    nb = qs.shape[0]
    q = qs.reshape(nb, -1, group)                       # [nb, k, group]
    out = np.empty((nb, q.shape[1], 2 * group), dtype=np.uint8)
    np.bitwise_and(q, 0x0F, out=out[:, :, :group])
    np.right_shift(q, 4, out=out[:, :, group:])
    return out


def dequant_f32(raw: np.ndarray) -> np.ndarray:
    return raw.view("<f4").astype(np.float32, copy=False)


def dequant_f16(raw: np.ndarray) -> np.ndarray:
    return raw.view("<f2").astype(np.float32)


def dequant_bf16(raw: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of a float32: shift the 16 bits up and reinterpret."""
    return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)


def dequant_q8_0(raw: np.ndarray) -> np.ndarray:
    d = _f16(raw[:, :2])                                # [nb, 1]
    out = raw[:, 2:].view(np.int8).astype(np.float32)   # [nb, 32]
    out *= d
    return out


def dequant_q4_0(raw: np.ndarray) -> np.ndarray:
    d = _f16(raw[:, :2])                                # [nb, 1]
    out = _nibbles(raw[:, 2:], 16).reshape(raw.shape[0], 32).astype(np.float32)
    out -= 8.0
    out *= d
    return out


def dequant_q4_1(raw: np.ndarray) -> np.ndarray:
    d, m = _f16(raw[:, :2]), _f16(raw[:, 2:4])          # [nb, 1] each
    nb = raw.shape[0]
    out = np.empty((nb, 32), dtype=np.float32)
    qs = raw[:, 4:]                                      # [nb, 16]
    np.bitwise_and(qs, 0x0F, out=out[:, :16], casting="unsafe")
    np.right_shift(qs, 4, out=out[:, 16:], casting="unsafe")
    out *= d
    out += m
    return out


def _k_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 [nb, 12] -> 6-bit scales and mins, float32 [nb, 8] each.

    Bytes 0-3 hold sub-blocks 0-3's scales (low 6 bits), 4-7 their mins; bytes 8-11 hold
    sub-blocks 4-7: low nibble scale, high nibble min, with their top 2 bits borrowed from
    the spare high bits of bytes 0-3 (scales) and 4-7 (mins).
    """
    a, b, c = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]   # [nb, 4] each
    sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 2) & 0x30)], axis=1)
    mn = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 2) & 0x30)], axis=1)
    return sc.astype(np.float32), mn.astype(np.float32)


def _k_affine(raw: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K: q [nb, 8, 32] codes -> (d * sc) * q - dmin * m, float32 [nb, 256]."""
    d, dmin = _f16(raw[:, 0:2]), _f16(raw[:, 2:4])      # [nb, 1]
    sc, mn = _k_scales_mins(raw[:, 4:4 + K_SCALE_BYTES])
    scale = (d * sc)[:, :, None]                         # [nb, 8, 1]
    offset = (dmin * mn)[:, :, None]                     # [nb, 8, 1]
    out = q.astype(np.float32)
    out *= scale
    out -= offset
    return out.reshape(raw.shape[0], QK_K)


def dequant_q4_k(raw: np.ndarray) -> np.ndarray:
    q = _nibbles(raw[:, 4 + K_SCALE_BYTES:], 32)        # [nb, 4, 64] -> 8 sub-blocks of 32
    return _k_affine(raw, q.reshape(raw.shape[0], 8, 32))


def dequant_q5_k(raw: np.ndarray) -> np.ndarray:
    nb = raw.shape[0]
    start = 4 + K_SCALE_BYTES
    qh = raw[:, start:start + 32]                        # [nb, 32]: bit j -> sub-block j
    low = _nibbles(raw[:, start + 32:], 32).reshape(nb, 8, 32)
    shifts = np.arange(8, dtype=np.uint8)[None, :, None]
    high = (qh[:, None, :] >> shifts) & 1                # [nb, 8, 32]
    return _k_affine(raw, low | (high << 4))


def dequant_q6_k(raw: np.ndarray) -> np.ndarray:
    """Q6_K: 16 sub-blocks of 16 values, int8 scales, codes 0..63 centred at 32.

    Per half (128 values): 64 low-nibble bytes give values 0-63 (low nibbles) and 64-127
    (high nibbles); 32 high-bit bytes give 2 bits to each of 4 runs of 32 values.
    """
    nb = raw.shape[0]
    ql = raw[:, :128].reshape(nb, 2, 1, 64)
    ql = (ql >> np.array([0, 4], np.uint8)[:, None]) & 0x0F     # [nb, 2, 2, 64]
    ql = ql.reshape(nb, 2, 4, 32)
    qh = raw[:, 128:192].reshape(nb, 2, 1, 32)
    qh = (qh >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & 0x03   # [nb, 2, 4, 32]
    q = (ql | (qh << 4)).astype(np.int8) - np.int8(32)          # [nb, 2, 4, 32]
    scales = raw[:, 192:208].view(np.int8).astype(np.float32)   # [nb, 16]
    d = _f16(raw[:, 208:210])                                    # [nb, 1]
    scale = (d * scales)[:, :, None]                             # [nb, 16, 1]
    out = q.reshape(nb, 16, 16).astype(np.float32)
    out *= scale
    return out.reshape(nb, QK_K)


def _t(name, type_id, block_size, type_size, fn=None) -> GGMLType:
    return GGMLType(name, type_id, block_size, type_size, fn)


# Type id -> layout. Types without a dequantizer are listed so errors can name them.
GGML_TYPES: dict[int, GGMLType] = {t.type_id: t for t in (
    _t("F32", 0, 1, 4, dequant_f32),
    _t("F16", 1, 1, 2, dequant_f16),
    _t("Q4_0", 2, 32, 18, dequant_q4_0),
    _t("Q4_1", 3, 32, 20, dequant_q4_1),
    _t("Q5_0", 6, 32, 22),
    _t("Q5_1", 7, 32, 24),
    _t("Q8_0", 8, 32, 34, dequant_q8_0),
    _t("Q8_1", 9, 32, 36),
    _t("Q2_K", 10, QK_K, 84),
    _t("Q3_K", 11, QK_K, 110),
    _t("Q4_K", 12, QK_K, 144, dequant_q4_k),
    _t("Q5_K", 13, QK_K, 176, dequant_q5_k),
    _t("Q6_K", 14, QK_K, 210, dequant_q6_k),
    _t("Q8_K", 15, QK_K, 292),
    _t("I8", 24, 1, 1),
    _t("I16", 25, 1, 2),
    _t("I32", 26, 1, 4),
    _t("I64", 27, 1, 8),
    _t("F64", 28, 1, 8),
    _t("BF16", 30, 1, 2, dequant_bf16),
)}
GGML_TYPE_BY_NAME: dict[str, GGMLType] = {t.name: t for t in GGML_TYPES.values()}


def dequantize(raw: np.ndarray, ggml_type: GGMLType, num_values: int) -> np.ndarray:
    """Raw tensor bytes (uint8, exactly `ggml_type.nbytes(num_values)`) -> float32 [num_values].

    Raises ValueError for a type without a dequantizer or a size that does not fit; the
    GGUF reader wraps that into a ModelFormatError naming the file.
    """
    if ggml_type.dequantize is None:
        raise ValueError(f"tensor type {ggml_type.name} (id {ggml_type.type_id}) is not supported")
    if num_values % ggml_type.block_size or raw.size != ggml_type.nbytes(num_values):
        raise ValueError(f"{raw.size} bytes do not hold {num_values} {ggml_type.name} values")
    blocks = raw.reshape(-1, ggml_type.type_size)       # [nb, type_size]
    return ggml_type.dequantize(blocks).reshape(num_values)


# --- input-major (transposed) dequantization --------------------------------------------
#
# A GGUF matrix is stored output-major ([out, in], blocks along `in`) but the forward wants
# input-major `[in, out]`. Transposing 400 MB of float32 afterwards costs more than the
# dequantization itself, so for the common formats the *packed bytes* (4-8x smaller) are
# transposed instead and the float arithmetic then writes straight into `[in, out]`.
# The float32 operations are the same as above, so the values are bit for bit
# `dequantize(...).reshape(out, in).T`.

def _scales_t(raw3: np.ndarray, start: int) -> np.ndarray:
    """uint8 [out, nb, type_size] -> the f16 at `start` of each block, float32 [nb, out]."""
    return np.ascontiguousarray(raw3[:, :, start:start + 2]).view("<f2")[:, :, 0].T.astype(np.float32)


def _codes_t(raw3: np.ndarray, start: int) -> np.ndarray:
    """uint8 [out, nb, type_size] -> bytes from `start` on, transposed: [nb, k, out]."""
    return np.ascontiguousarray(raw3[:, :, start:].transpose(1, 2, 0))


def dequant_t_q8_0(raw3: np.ndarray) -> np.ndarray:
    d = _scales_t(raw3, 0)                                      # [nb, out]
    out = _codes_t(raw3, 2).view(np.int8).astype(np.float32)    # [nb, 32, out]
    out *= d[:, None, :]
    return out


def dequant_t_q4_1(raw3: np.ndarray) -> np.ndarray:
    d, m = _scales_t(raw3, 0), _scales_t(raw3, 2)               # [nb, out] each
    qs = _codes_t(raw3, 4)                                      # [nb, 16, out]
    out = np.empty((qs.shape[0], 32, qs.shape[2]), np.float32)  # [nb, 32, out]
    np.bitwise_and(qs, 0x0F, out=out[:, :16], casting="unsafe")
    np.right_shift(qs, 4, out=out[:, 16:], casting="unsafe")
    out *= d[:, None, :]
    out += m[:, None, :]
    return out


def dequant_t_q4_0(raw3: np.ndarray) -> np.ndarray:
    d = _scales_t(raw3, 0)                                      # [nb, out]
    qs = _codes_t(raw3, 2)                                      # [nb, 16, out]
    out = np.empty((qs.shape[0], 32, qs.shape[2]), np.float32)  # [nb, 32, out]
    np.bitwise_and(qs, 0x0F, out=out[:, :16], casting="unsafe")
    np.right_shift(qs, 4, out=out[:, 16:], casting="unsafe")
    out -= 8.0
    out *= d[:, None, :]
    return out


TRANSPOSED_DEQUANTIZERS = {"Q8_0": dequant_t_q8_0, "Q4_1": dequant_t_q4_1, "Q4_0": dequant_t_q4_0}


def dequantize_input_major(raw: np.ndarray, ggml_type: GGMLType, out_dim: int, in_dim: int) -> np.ndarray:
    """Raw bytes of an output-major [out, in] matrix -> float32 [in, out], C-contiguous."""
    if ggml_type.dequantize is None:
        raise ValueError(f"tensor type {ggml_type.name} (id {ggml_type.type_id}) is not supported")
    if in_dim % ggml_type.block_size or raw.size != ggml_type.nbytes(out_dim * in_dim):
        raise ValueError(f"{raw.size} bytes do not hold a {out_dim}x{in_dim} {ggml_type.name} matrix")
    rows = raw.reshape(out_dim, -1)                             # [out, row_bytes]
    fast = TRANSPOSED_DEQUANTIZERS.get(ggml_type.name)
    if fast is None:
        values = dequantize(np.ascontiguousarray(rows).reshape(-1), ggml_type, out_dim * in_dim)
        return np.ascontiguousarray(values.reshape(out_dim, in_dim).T)   # [in, out]
    raw3 = rows.reshape(out_dim, in_dim // ggml_type.block_size, ggml_type.type_size)
    return fast(raw3).reshape(in_dim, out_dim)                  # [nb, block, out] -> [in, out]
