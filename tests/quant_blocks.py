"""Random GGML blocks for the dequantizer tests: random codes, finite float16 scales.

Random bytes are fine for a block's codes and packed sub-scales, but a random float16
scale is sometimes NaN or inf, whose arithmetic proves nothing; so the scale fields (listed
per type below) are overwritten with finite halves of either sign, subnormal to large.
"""
from __future__ import annotations

import numpy as np

from engine.formats.quants import GGML_TYPE_BY_NAME

# Where each block format keeps its float16 scale(s), as byte offsets inside a block.
F16_SCALE_OFFSETS = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ4_NL": (0,), "IQ4_XS": (0,),
}
SCALE_LOG2_RANGE = (-20, 8)     # |scale| from 2^-20 (a float16 subnormal) to 2^8


def random_blocks(name: str, num_blocks: int, seed: int) -> np.ndarray:
    """uint8 [num_blocks, type_size] of type `name`: random codes, finite random scales."""
    gtype = GGML_TYPE_BY_NAME[name]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (num_blocks, gtype.type_size), np.uint8)
    for off in F16_SCALE_OFFSETS.get(name, ()):
        magnitude = np.exp2(rng.uniform(*SCALE_LOG2_RANGE, num_blocks))
        scale = (magnitude * rng.choice([-1.0, 1.0], num_blocks)).astype("<f2")
        blocks[:, off:off + 2] = scale.view(np.uint8).reshape(num_blocks, 2)
    return blocks
