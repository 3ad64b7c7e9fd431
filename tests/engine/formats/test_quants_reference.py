"""Every dequantizer against the `gguf` package's reference (`gguf.quants.dequantize`).

gguf-py (a test extra) is llama.cpp's own Python reader; its dequantizers follow
ggml-quants.c. The blocks are random with finite float16 scales (tests/quant_blocks.py), so
every output is a real number, and "equal" means the same float32 bits.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize as reference_dequantize

from engine.formats.quants import GGML_TYPE_BY_NAME, GGML_TYPES, dequantize
from tests.quant_blocks import F16_SCALE_OFFSETS, random_blocks

NUM_BLOCKS = 300            # enough random blocks to hit every code and scale pattern

WHOLE_VALUE_TYPES = ("F32", "F16", "BF16")      # no blocks: random bits, NaN included

# Every type llama.cpp's usual presets write, plus IQ4_NL / IQ4_XS.
REQUIRED = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K",
            "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"}


def test_every_required_type_has_a_dequantizer_and_a_reference_case():
    assert {n for n, t in GGML_TYPE_BY_NAME.items() if t.dequantize} >= REQUIRED
    assert REQUIRED <= set(F16_SCALE_OFFSETS) | set(WHOLE_VALUE_TYPES)


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_dequantizer_equals_gguf_reference_on_random_blocks(name):
    blocks = random_blocks(name, NUM_BLOCKS, seed=sorted(REQUIRED).index(name))
    gtype = GGML_TYPE_BY_NAME[name]
    num_values = NUM_BLOCKS * gtype.block_size
    expected = reference_dequantize(blocks.reshape(-1), GGMLQuantizationType[name])
    got = dequantize(blocks.reshape(-1), gtype, num_values)
    assert got.dtype == np.float32 and got.shape == (num_values,)
    if name not in WHOLE_VALUE_TYPES:
        assert np.isfinite(got).all()
        assert len(np.unique(got)) > num_values // 16       # not a degenerate all-zero case
    assert np.array_equal(got.view(np.uint32), expected.astype(np.float32).view(np.uint32))


# gguf-py sizes Q8_1 with float32 scales (40 bytes); ggml's block_q8_1 has two halves (36).
SIZE_EXCEPTIONS = {"Q8_1"}


def test_block_geometry_matches_gguf_for_every_listed_type():
    for gtype in GGML_TYPES.values():
        if gtype.name in SIZE_EXCEPTIONS:
            continue
        qtype = GGMLQuantizationType[gtype.name]
        assert qtype.value == gtype.type_id, gtype.name
        assert GGML_QUANT_SIZES[qtype] == (gtype.block_size, gtype.type_size), gtype.name
