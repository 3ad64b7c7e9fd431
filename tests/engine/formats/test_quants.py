"""Dequantizers against llama.cpp's reference output (exact), layouts by hand, quantizers."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.formats.quants import GGML_TYPE_BY_NAME, GGML_TYPES, dequantize, dequantize_input_major
from tests.quant_blocks import F16_SCALE_OFFSETS, random_blocks
from tests.quantize import quantize_q4_1, quantize_q8_0
from tests.oracle import ORACLE_DIR

CASES = json.loads((ORACLE_DIR / "dequant_cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["type"] for c in CASES])
def test_dequantizer_reproduces_reference_exactly(case):
    gtype = GGML_TYPE_BY_NAME[case["type"]]
    assert (gtype.block_size, gtype.type_size) == (case["block_size"], case["type_size"])
    raw = np.frombuffer(bytes.fromhex(case["raw_hex"]), np.uint8)
    expected = np.array(case["values"], np.float32)
    got = dequantize(raw, gtype, expected.size)
    assert got.dtype == np.float32
    assert np.array_equal(got, expected)


def test_oracle_covers_every_required_type():
    assert {c["type"] for c in CASES} >= {"Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K",
                                           "F16", "BF16"}


def _f16_bytes(value: float) -> list[int]:
    return list(np.float16(value).tobytes())


def test_q4_1_low_nibbles_are_first_half_high_nibbles_second():
    block = _f16_bytes(0.5) + _f16_bytes(-1.0) + [0x31] * 16      # low 1, high 3
    got = dequantize(np.array(block, np.uint8), GGML_TYPE_BY_NAME["Q4_1"], 32)
    assert got.tolist() == [0.5 * 1 - 1.0] * 16 + [0.5 * 3 - 1.0] * 16


def test_q4_0_codes_are_centred_at_8():
    block = _f16_bytes(2.0) + [0xF0] * 16                          # low 0, high 15
    got = dequantize(np.array(block, np.uint8), GGML_TYPE_BY_NAME["Q4_0"], 32)
    assert got.tolist() == [-16.0] * 16 + [14.0] * 16


def test_q5_0_fifth_bit_of_value_j_is_bit_j_of_the_little_endian_u32():
    qh = (1 << 0) | (1 << 17) | (1 << 31)                          # values 0, 17, 31 get +16
    block = _f16_bytes(0.5) + list(qh.to_bytes(4, "little")) + [0x21] * 16   # low 1, high 2
    got = dequantize(np.array(block, np.uint8), GGML_TYPE_BY_NAME["Q5_0"], 32)
    expected = [0.5 * (1 - 16)] * 16 + [0.5 * (2 - 16)] * 16
    for j in (0, 17, 31):
        expected[j] += 0.5 * 16
    assert got.tolist() == expected


def test_q8_0_is_signed_bytes_times_scale():
    block = _f16_bytes(0.25) + list(np.arange(-16, 16, dtype=np.int8).view(np.uint8))
    got = dequantize(np.array(block, np.uint8), GGML_TYPE_BY_NAME["Q8_0"], 32)
    assert got.tolist() == [0.25 * q for q in range(-16, 16)]


def test_f32_and_bf16_by_hand():
    f32 = np.array([1.5, -2.0], "<f4").view(np.uint8)
    assert dequantize(f32, GGML_TYPE_BY_NAME["F32"], 2).tolist() == [1.5, -2.0]
    bf16 = np.array([0x3F80, 0xC040], "<u2").view(np.uint8)          # 1.0, -3.0
    assert dequantize(bf16, GGML_TYPE_BY_NAME["BF16"], 2).tolist() == [1.0, -3.0]


@pytest.mark.parametrize("name", sorted(F16_SCALE_OFFSETS))
def test_many_blocks_at_once_equal_block_by_block(name):
    gtype = GGML_TYPE_BY_NAME[name]
    num_blocks = 5
    blocks = random_blocks(name, num_blocks, seed=0)    # finite, distinct scales
    whole = dequantize(blocks.reshape(-1), gtype, num_blocks * gtype.block_size)
    parts = [dequantize(blocks[b], gtype, gtype.block_size) for b in range(num_blocks)]
    assert np.array_equal(whole, np.concatenate(parts))
    assert len(np.unique(whole)) > 8


def test_unsupported_type_and_wrong_size_raise_value_errors():
    with pytest.raises(ValueError, match="IQ2_XXS"):
        dequantize(np.zeros(66, np.uint8), GGML_TYPE_BY_NAME["IQ2_XXS"], 256)
    with pytest.raises(ValueError, match="do not hold"):
        dequantize(np.zeros(33, np.uint8), GGML_TYPE_BY_NAME["Q8_0"], 32)
    assert GGML_TYPES[30].name == "BF16" and GGML_TYPES[14].name == "Q6_K"


def test_q8_0_round_trip_error_is_within_half_a_step():
    x = np.random.default_rng(1).standard_normal(32 * 40).astype(np.float32)
    raw = quantize_q8_0(x)
    assert raw.size == 40 * 34
    back = dequantize(raw, GGML_TYPE_BY_NAME["Q8_0"], x.size)
    step = np.abs(x.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
    assert np.all(np.abs(back - x).reshape(-1, 32) <= step * 0.5 + 1e-3 * step)


def test_q4_1_round_trip_error_is_within_half_a_step():
    x = np.random.default_rng(2).uniform(-3, 5, 32 * 40).astype(np.float32)
    raw = quantize_q4_1(x)
    assert raw.size == 40 * 20
    back = dequantize(raw, GGML_TYPE_BY_NAME["Q4_1"], x.size).reshape(-1, 32)
    rows = x.reshape(-1, 32)
    step = (rows.max(axis=1) - rows.min(axis=1))[:, None] / 15
    assert np.all(np.abs(back - rows) <= step * 0.5 + 0.01 * step)


def test_constant_and_zero_blocks_quantize_exactly():
    zeros = np.zeros(32, np.float32)
    assert np.array_equal(dequantize(quantize_q8_0(zeros), GGML_TYPE_BY_NAME["Q8_0"], 32), zeros)
    twos = np.full(32, 2.0, np.float32)
    assert np.array_equal(dequantize(quantize_q4_1(twos), GGML_TYPE_BY_NAME["Q4_1"], 32), twos)


@pytest.mark.parametrize("name", ["Q8_0", "Q4_1", "Q4_0", "Q4_K", "Q6_K", "F16", "BF16",
                                  "Q5_0", "Q3_K", "IQ4_XS"])
def test_input_major_dequantization_is_the_exact_transpose(name):
    gtype = GGML_TYPE_BY_NAME[name]
    out_dim, in_dim = 6, 512
    raw = np.random.default_rng(4).integers(0, 256, gtype.nbytes(out_dim * in_dim), np.uint8)
    order = np.array([3, 0, 5, 1, 4, 2])
    with np.errstate(all="ignore"):                      # random bytes make some NaN scales
        reordered = raw.reshape(out_dim, -1)[order].reshape(-1)      # output rows picked first, as gguf.py does
        got = dequantize_input_major(reordered, gtype, out_dim, in_dim)
        expected = dequantize(raw, gtype, out_dim * in_dim).reshape(out_dim, in_dim)[order].T
    assert got.shape == (in_dim, out_dim) and got.flags.c_contiguous
    assert np.array_equal(got, expected, equal_nan=True)
