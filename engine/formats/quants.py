"""GGML tensor types: the type table, the 32-value block formats, and `dequantize`.

A GGUF tensor is a run of *blocks*. Each block packs `block_size` values into `type_size`
bytes: a float16 scale (sometimes a minimum, sometimes 6-bit sub-scales) followed by small
integers. Dequantizing means `value = scale * q (+ min)` per block. The dequantizers turn
the raw bytes of a whole tensor into float32 in a handful of numpy operations over *all*
blocks at once -- never a Python loop per block -- because the real model has millions of
blocks and must load in about a second. This module holds the plain formats; the 256-value
K-quants live in `quants_k.py`, the table-lookup IQ4 types in `quants_iq.py`, the shared
bit-unpacking in `quant_bits.py`; `GGML_TYPES` here registers them all.

Exactness: each dequantizer performs the same float32 operations, in the same order, as
llama.cpp's reference (`d * q + m`, `(d * sc) * q - dmin * m`, ...), so its output is bit
for bit the reference output (`../shared/oracle/dequant_cases.json` and the `gguf`
package's `gguf.quants.dequantize` on random blocks check this).

What it is not: a quantizer. The runtime only reads; the two small quantizers the tests
use to write GGUF test models (Q8_0, Q4_1) live in `tests/quantize.py`.

Block layouts (bytes, little-endian; `f16` is an IEEE half):

    Q8_0  [d:f16][q:int8 x32]                          value = d * q
    Q4_0  [d:f16][nibbles x16]                         value = d * (nibble - 8)
    Q4_1  [d:f16][m:f16][nibbles x16]                  value = d * nibble + m
    Q5_0  [d:f16][qh:u32][nibbles x16]                 value = d * (q5 - 16)
    Q5_1  [d:f16][m:f16][qh:u32][nibbles x16]          value = d * q5 + m

In these formats the low nibbles of the 16 bytes are values 0-15 and the high nibbles
values 16-31; Q5's fifth bit of value j is bit j of `qh`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.formats.quant_bits import QK_K, Dequantizer, f16_column, split_nibbles
from engine.formats.quants_iq import dequant_iq4_nl, dequant_iq4_xs
from engine.formats.quants_k import (dequant_q2_k, dequant_q3_k, dequant_q4_k, dequant_q5_k,
                                     dequant_q6_k)

Q4_CODE_BIAS = 8            # Q4_0's 4-bit codes are stored +8
Q5_CODE_BIAS = 16           # Q5_0's 5-bit codes are stored +16


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


def dequant_f32(raw: np.ndarray) -> np.ndarray:
    return raw.view("<f4").astype(np.float32, copy=False)


def dequant_f16(raw: np.ndarray) -> np.ndarray:
    return raw.view("<f2").astype(np.float32)


def dequant_bf16(raw: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of a float32: shift the 16 bits up and reinterpret."""
    return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)


def dequant_q8_0(raw: np.ndarray) -> np.ndarray:
    d = f16_column(raw[:, :2])                          # [nb, 1]
    out = raw[:, 2:].view(np.int8).astype(np.float32)   # [nb, 32]
    out *= d
    return out


def dequant_q4_0(raw: np.ndarray) -> np.ndarray:
    d = f16_column(raw[:, :2])                          # [nb, 1]
    out = split_nibbles(raw[:, 2:], 16).reshape(raw.shape[0], 32).astype(np.float32)
    out -= float(Q4_CODE_BIAS)
    out *= d
    return out


def dequant_q4_1(raw: np.ndarray) -> np.ndarray:
    d, m = f16_column(raw[:, :2]), f16_column(raw[:, 2:4])      # [nb, 1] each
    nb = raw.shape[0]
    out = np.empty((nb, 32), dtype=np.float32)
    qs = raw[:, 4:]                                      # [nb, 16]
    np.bitwise_and(qs, 0x0F, out=out[:, :16], casting="unsafe")
    np.right_shift(qs, 4, out=out[:, 16:], casting="unsafe")
    out *= d
    out += m
    return out


def _q5_codes(raw: np.ndarray, start: int) -> np.ndarray:
    """Q5_0/Q5_1 block bytes from `start` ([qh:4][nibbles x16]) -> 5-bit codes uint8 [nb, 32].

    Bit j of the little-endian u32 `qh` is the fifth bit of value j; the nibbles are laid
    out as in Q4_0 (low nibbles values 0-15, high nibbles 16-31).
    """
    high = np.unpackbits(raw[:, start:start + 4], axis=1, bitorder="little")   # [nb, 32]
    low = split_nibbles(raw[:, start + 4:start + 20], 16).reshape(raw.shape[0], 32)
    return low | (high << 4)


def dequant_q5_0(raw: np.ndarray) -> np.ndarray:
    d = f16_column(raw[:, :2])                          # [nb, 1]
    out = (_q5_codes(raw, 2).astype(np.int8) - np.int8(Q5_CODE_BIAS)).astype(np.float32)
    out *= d
    return out


def dequant_q5_1(raw: np.ndarray) -> np.ndarray:
    d, m = f16_column(raw[:, :2]), f16_column(raw[:, 2:4])      # [nb, 1] each
    out = _q5_codes(raw, 4).astype(np.float32)          # [nb, 32]
    out *= d
    out += m
    return out


def _t(name, type_id, block_size, type_size, fn=None) -> GGMLType:
    return GGMLType(name, type_id, block_size, type_size, fn)


# Type id -> layout. Types without a dequantizer are listed so errors can name them.
GGML_TYPES: dict[int, GGMLType] = {t.type_id: t for t in (
    _t("F32", 0, 1, 4, dequant_f32),
    _t("F16", 1, 1, 2, dequant_f16),
    _t("Q4_0", 2, 32, 18, dequant_q4_0),
    _t("Q4_1", 3, 32, 20, dequant_q4_1),
    _t("Q5_0", 6, 32, 22, dequant_q5_0),
    _t("Q5_1", 7, 32, 24, dequant_q5_1),
    _t("Q8_0", 8, 32, 34, dequant_q8_0),
    _t("Q8_1", 9, 32, 36),
    _t("Q2_K", 10, QK_K, 84, dequant_q2_k),
    _t("Q3_K", 11, QK_K, 110, dequant_q3_k),
    _t("Q4_K", 12, QK_K, 144, dequant_q4_k),
    _t("Q5_K", 13, QK_K, 176, dequant_q5_k),
    _t("Q6_K", 14, QK_K, 210, dequant_q6_k),
    _t("Q8_K", 15, QK_K, 292),
    _t("IQ2_XXS", 16, QK_K, 66),
    _t("IQ2_XS", 17, QK_K, 74),
    _t("IQ3_XXS", 18, QK_K, 98),
    _t("IQ1_S", 19, QK_K, 50),
    _t("IQ4_NL", 20, 32, 18, dequant_iq4_nl),
    _t("IQ3_S", 21, QK_K, 110),
    _t("IQ2_S", 22, QK_K, 82),
    _t("IQ4_XS", 23, QK_K, 136, dequant_iq4_xs),
    _t("I8", 24, 1, 1),
    _t("I16", 25, 1, 2),
    _t("I32", 26, 1, 4),
    _t("I64", 27, 1, 8),
    _t("F64", 28, 1, 8),
    _t("IQ1_M", 29, QK_K, 56),
    _t("BF16", 30, 1, 2, dequant_bf16),
    _t("TQ1_0", 34, QK_K, 54),
    _t("TQ2_0", 35, QK_K, 66),
    _t("MXFP4", 39, 32, 17),
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
    out -= float(Q4_CODE_BIAS)
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
