"""The non-linear 4-bit types IQ4_NL and IQ4_XS: nibbles index a fixed table of levels.

Instead of `d * (nibble - 8)`, a code picks one of 16 unevenly spaced int8 levels (denser
near zero, where trained weights cluster), times the block scale: `value = d * LEVELS[q]`.
IQ4_NL uses 32-value blocks with one float16 scale; IQ4_XS packs 256 values with one
float16 super-scale and a signed 6-bit scale per sub-block of 32. The float32 operations
follow llama.cpp's order, so the output is bit for bit the reference.

Block layouts (bytes, little-endian):

    IQ4_NL  [d:f16][nibbles x16]                                      value = d * LEVELS[q]
    IQ4_XS  [d:f16][scales_h:u16][scales_l:4][nibbles x128]   8 sub-blocks of 32

IQ4_XS sub-block j's scale: low 4 bits are nibble j of scales_l (low nibble first), top 2
bits are bits 2j..2j+1 of scales_h; stored +32. In both, as in Q4_0, a run of 16 bytes is
32 values: the low nibbles first, then the high nibbles.
"""
from __future__ import annotations

import numpy as np

from engine.formats.quant_bits import QK_K, f16_column, split_crumbs, split_nibbles

# The 16 levels a 4-bit code stands for (llama.cpp's kvalues_iq4nl), as float32: exact,
# since they are small integers.
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                       1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)
IQ4_XS_SCALE_BIAS = 32      # IQ4_XS's 6-bit sub-block scales are stored +32
IQ4_XS_SUB_BLOCKS = QK_K // 32


def dequant_iq4_nl(raw: np.ndarray) -> np.ndarray:
    d = f16_column(raw[:, 0:2])                          # [nb, 1]
    out = IQ4_LEVELS[split_nibbles(raw[:, 2:], 16)].reshape(raw.shape[0], 32)
    out *= d
    return out


def _iq4_xs_scales(raw: np.ndarray) -> np.ndarray:
    """uint8 [nb, 136] -> the 8 signed 6-bit sub-block scales, float32 [nb, 8]."""
    nb = raw.shape[0]
    low = split_nibbles(raw[:, 4:8], 1).reshape(nb, IQ4_XS_SUB_BLOCKS)  # byte i: 2i, 2i+1
    top = split_crumbs(raw[:, 2:4], 1).reshape(nb, IQ4_XS_SUB_BLOCKS)   # u16 bits 2j..2j+1
    return ((low | (top << 4)).astype(np.int8) - np.int8(IQ4_XS_SCALE_BIAS)).astype(np.float32)


def dequant_iq4_xs(raw: np.ndarray) -> np.ndarray:
    nb = raw.shape[0]
    scale = f16_column(raw[:, 0:2]) * _iq4_xs_scales(raw)   # [nb, 8]
    out = IQ4_LEVELS[split_nibbles(raw[:, 8:], 16)]         # [nb, 8, 32]
    out *= scale[:, :, None]
    return out.reshape(nb, QK_K)
