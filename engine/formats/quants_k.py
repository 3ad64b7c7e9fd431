"""The K-quants: 256-value super-blocks with per-sub-block scales (Q2_K .. Q6_K).

A super-block holds 256 values as 8 sub-blocks of 32 (Q4_K, Q5_K) or 16 sub-blocks of 16
(Q2_K, Q3_K, Q6_K). Each sub-block has a small integer scale (and for Q2_K/Q4_K/Q5_K a
minimum) that multiplies one or two float16 super-scales: `value = (d * sc) * q - dmin * m`.
Each dequantizer here performs llama.cpp's float32 operations in llama.cpp's order, so the
output is bit for bit the reference (tests/engine/formats/test_quants_reference.py checks it against
the `gguf` package on random blocks).

Block layouts (bytes, little-endian; `f16` is an IEEE half):

    Q2_K  [scales:16][2-bit codes:64][d:f16][dmin:f16]       scale byte: low nibble sc, high m
    Q3_K  [high bits:32][2-bit codes:64][scales:12][d:f16]   16 signed 6-bit scales
    Q4_K  [d:f16][dmin:f16][scales:12][nibbles x128]         8 sub-blocks of 32, 6-bit sc/min
    Q5_K  [d][dmin][scales:12][high bits:32][nibbles x128]
    Q6_K  [low nibbles:128][high 2-bits:64][scales:int8 x16][d:f16]

The 2-bit fields of Q2_K/Q3_K/Q6_K: each half super-block (128 values) has 32 bytes whose
bits 0-1, 2-3, 4-5, 6-7 are four runs of 32 values. The high bits of Q3_K/Q5_K: bit j of
the 32 bytes is run j of 32 values.
"""
from __future__ import annotations

import numpy as np

from engine.formats.quant_bits import QK_K, bit_planes, f16_column, split_crumbs, split_nibbles

K_SCALE_BYTES = 12          # packed 6-bit scales: 8 (sc, min) pairs (Q4_K/Q5_K) or 16 sc (Q3_K)
Q3_K_SCALE_BIAS = 32        # Q3_K's 6-bit scales are stored +32
Q3_K_CODE_BIAS = 4          # a Q3_K code whose high bit is clear is 4 lower
Q6_K_CODE_BIAS = 32         # Q6_K's 6-bit codes are stored +32


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
    d, dmin = f16_column(raw[:, 0:2]), f16_column(raw[:, 2:4])  # [nb, 1]
    sc, mn = _k_scales_mins(raw[:, 4:4 + K_SCALE_BYTES])
    scale = (d * sc)[:, :, None]                         # [nb, 8, 1]
    offset = (dmin * mn)[:, :, None]                     # [nb, 8, 1]
    out = q.astype(np.float32)
    out *= scale
    out -= offset
    return out.reshape(raw.shape[0], QK_K)


def _scaled_16s(q: np.ndarray, scale: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
    """Codes [nb, ...] (256 per block) -> scale * q (- offset), float32 [nb, 256].

    `scale` and `offset` are float32 [nb, 16]: one per sub-block of 16 values.
    """
    nb = q.shape[0]
    out = q.reshape(nb, 16, 16).astype(np.float32)
    out *= scale[:, :, None]
    if offset is not None:
        out -= offset[:, :, None]
    return out.reshape(nb, QK_K)


def dequant_q2_k(raw: np.ndarray) -> np.ndarray:
    """Q2_K: 16 sub-blocks of 16 values, 2-bit codes, 4-bit scale and min per sub-block."""
    scales = raw[:, 0:16]                                # [nb, 16]
    q = split_crumbs(raw[:, 16:80], 32)                  # [nb, 2, 4, 32] -> 16 x 16 values
    d, dmin = f16_column(raw[:, 80:82]), f16_column(raw[:, 82:84])  # [nb, 1]
    scale = d * (scales & 0x0F).astype(np.float32)       # [nb, 16]
    offset = dmin * (scales >> 4).astype(np.float32)     # [nb, 16]
    return _scaled_16s(q, scale, offset)


def _q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """uint8 [nb, 12] -> the 16 signed 6-bit scales of Q3_K, float32 [nb, 16].

    Bytes 0-7: low nibbles are scales 0-7's low 4 bits, high nibbles scales 8-15's. Bytes
    8-11: the 2-bit field k of byte i is the top 2 bits of scale 4*k + i.
    """
    low = packed[:, 0:8]                                 # [nb, 8]
    low4 = np.concatenate([low & 0x0F, low >> 4], axis=1)   # [nb, 16]
    top2 = split_crumbs(packed[:, 8:12], 4).reshape(-1, 16)  # [nb, 1, 4, 4] -> [nb, 16]
    sc = (low4 | (top2 << 4)).astype(np.int8) - np.int8(Q3_K_SCALE_BIAS)
    return sc.astype(np.float32)


def dequant_q3_k(raw: np.ndarray) -> np.ndarray:
    """Q3_K: 16 sub-blocks of 16 values, 3-bit codes (2 low bits + 1 high bit) centred at 4."""
    nb = raw.shape[0]
    high = bit_planes(raw[:, 0:32])                      # [nb, 8, 32]: run j's high bits
    low = split_crumbs(raw[:, 32:96], 32).reshape(nb, 8, 32)
    q = (low | (high << 2)).astype(np.int8) - np.int8(Q3_K_CODE_BIAS)  # [nb, 8, 32]
    d = f16_column(raw[:, 108:110])                      # [nb, 1]
    return _scaled_16s(q, d * _q3_k_scales(raw[:, 96:108]))


def dequant_q4_k(raw: np.ndarray) -> np.ndarray:
    q = split_nibbles(raw[:, 4 + K_SCALE_BYTES:], 32)   # [nb, 4, 64] -> 8 sub-blocks of 32
    return _k_affine(raw, q.reshape(raw.shape[0], 8, 32))


def dequant_q5_k(raw: np.ndarray) -> np.ndarray:
    nb = raw.shape[0]
    start = 4 + K_SCALE_BYTES
    high = bit_planes(raw[:, start:start + 32])          # [nb, 8, 32]: bit j -> sub-block j
    low = split_nibbles(raw[:, start + 32:], 32).reshape(nb, 8, 32)
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
    qh = split_crumbs(raw[:, 128:192], 32)                      # [nb, 2, 4, 32]
    q = (ql | (qh << 4)).astype(np.int8) - np.int8(Q6_K_CODE_BIAS)  # [nb, 2, 4, 32]
    scales = raw[:, 192:208].view(np.int8).astype(np.float32)   # [nb, 16]
    d = f16_column(raw[:, 208:210])                              # [nb, 1]
    return _scaled_16s(q, d * scales)
