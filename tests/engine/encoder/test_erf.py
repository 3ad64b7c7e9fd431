"""The vectorised erf against math.erf on a dense grid, and the exact GELU built on it."""
from __future__ import annotations

import math

import numpy as np

from engine.encoder.erf import erf, gelu_erf_

ERF_TOLERANCE = 1e-7              # the brief's bound, absolute


def test_erf_matches_math_erf_on_a_dense_grid():
    grid = np.concatenate([np.linspace(-10.0, 10.0, 400_001),
                           np.linspace(-1e-3, 1e-3, 2_001), [0.0, 3.999, 4.0, 4.001, 30.0]])
    expected = np.array([math.erf(v) for v in grid])
    assert np.abs(erf(grid) - expected).max() <= ERF_TOLERANCE


def test_erf_is_odd_and_saturates():
    x = np.array([0.3, 1.7, 5.0, np.inf])
    assert np.array_equal(erf(-x), -erf(x))
    assert erf(np.array([np.inf]))[0] == erf(np.array([4.0]))[0]
    assert abs(erf(np.array([np.inf]))[0] - 1.0) <= ERF_TOLERANCE


def test_gelu_is_x_times_phi_in_place_over_several_slices():
    x = np.linspace(-12.0, 12.0, 7 * 14_289, dtype=np.float32).reshape(7, -1)  # > one slice
    expected = np.array([v * 0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))
                         for v in x.reshape(-1).astype(np.float64)]).reshape(x.shape)
    out = gelu_erf_(x)
    assert out is x and x.dtype == np.float32
    assert np.abs(x - expected).max() <= 2e-6       # float32 rounding of values up to 12
