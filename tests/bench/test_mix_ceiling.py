"""The perfect-engine bound of bench/mix_ceiling.py: the averages of a window's step mix, the
K/V bytes a cached position costs, the roofline maths on a tiny shape, and the bound's
arithmetic (closed_loop's row fields). No timing is asserted: only what the numbers are
made of."""
from __future__ import annotations

import numpy as np
import pytest

from bench.mix_ceiling import Bound, MixCeiling, ModelShape, StepMix, bound_row

TINY = ModelShape(hidden=8, intermediate=16, layers=2, vocab=32, kv_size=4)


def test_step_mix_averages_per_step():
    mix = StepMix(steps=4, rows=400, sampled_rows=256, context_positions=34_000)
    assert mix.per_step() == (100.0, 64.0, 8_500.0)
    assert StepMix().per_step() == (0.0, 0.0, 0.0)          # an empty window divides by one


def test_kv_bytes_count_k_and_v_in_every_layer():
    smol = ModelShape(hidden=576, intermediate=1536, layers=30, vocab=49152, kv_size=3 * 64)
    assert smol.kv_bytes_per_position() == 30 * 2 * 192 * 4      # 46,080 bytes


def test_the_step_samples_only_the_sampled_rows():
    ceiling = MixCeiling(TINY)
    logits = ceiling._step(rows=10, sampled_rows=3)
    assert logits.shape == (3, TINY.vocab) and logits.dtype == np.float32
    assert np.isfinite(logits).all()


def test_the_bound_adds_the_kv_floor_to_the_mix_step():
    ceiling = MixCeiling(TINY)
    mix = StepMix(steps=2, rows=20, sampled_rows=8, context_positions=2_000)
    read_bytes_s = 1e6                                         # slow on purpose: the floor dominates
    bound = ceiling.bound(mix, batch=4, read_bytes_s=read_bytes_s)
    floor_s = 1_000 * TINY.kv_bytes_per_position() / read_bytes_s
    assert bound.kv_floor_s == pytest.approx(floor_s)
    assert bound.sampled_rows == 4 and bound.batch == 4
    assert bound.tok_s == pytest.approx(4 / (bound.mix_step_s + floor_s))
    assert bound.tok_s < 4 / floor_s                           # the K/V floor alone caps it
    assert bound.roofline_tok_s == pytest.approx(4 / bound.roofline_step_s)
    assert bound.ratio == pytest.approx(bound.tok_s / bound.roofline_tok_s)


def test_steps_are_timed_per_shape():
    times = MixCeiling(TINY).steps_s([(3, 1), (5, 5), (2, 2)])
    assert len(times) == 3 and all(t > 0 for t in times)


def test_closed_loop_reports_the_engine_as_a_share_of_the_bound():
    mix = StepMix(steps=10, rows=1_000, sampled_rows=640, context_positions=85_000)
    bound = Bound(sampled_rows=64.0, mix_step_s=0.17, kv_floor_s=0.0128571, read_bytes_s=33e9,
                  batch=64, roofline_step_s=0.128)          # 350 tok/s against 500
    row = bound_row(280.0, mix, bound)
    assert row["rows_per_step"] == 100.0 and row["sampled_per_step"] == 64.0
    assert row["context_per_step"] == 8_500 and row["mix_step_ms"] == 170.0
    assert row["bound_tok_s"] == 350.0 and row["read_gb_s"] == 33.0
    assert row["bound_ratio"] == 0.7 and row["of_bound"] == 0.8


def test_a_sliding_layer_reads_only_its_window():
    gemma_like = ModelShape(hidden=640, intermediate=2048, layers=18, vocab=262_144, kv_size=256,
                            q_size=1024, sliding_layers=15, window_tokens=512)
    per_layer_position = 2 * 256 * 4                        # K and V, float32
    # a short row: every layer reads all of it; a long one: 15 layers read 512 positions
    assert gemma_like.kv_read_bytes([100]) == 18 * 100 * per_layer_position
    assert gemma_like.kv_read_bytes([4000]) == (3 * 4000 + 15 * 512) * per_layer_position
    assert gemma_like.kv_read_bytes([100, 4000]) == (18 * 100 + 3 * 4000 + 15 * 512) * per_layer_position


def test_the_query_width_shapes_the_attention_projections():
    wide = ModelShape(hidden=8, intermediate=16, layers=1, vocab=32, kv_size=4, q_size=12)
    wqkv, wo, _, _ = MixCeiling(wide).layers[0]
    assert wqkv.shape == (8, 12 + 2 * 4) and wo.shape == (12, 8)
    layers_s, head_s = MixCeiling(wide).parts_s(rows=3, sampled_rows=2)
    assert layers_s > 0 and head_s > 0
