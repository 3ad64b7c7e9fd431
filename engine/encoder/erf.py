"""A vectorised erf (numpy has none) and the exact GELU that BERT uses, x * Phi(x).

erf is odd, and erf(x)/x is smooth and even, so on |x| <= ERF_CLIP it is a rational
function of t = x*x:

    erf(x) ~= x * P(t) / Q(t),   P of degree 6, Q of degree 5 (Q(0) = 1)

and outside that range erf(x) = sign(x) within 1.6e-8 (erfc(4) = 1.54e-8). The coefficients
were fitted for this module by weighted linear least squares on `x * P / Q - erf(x)` against
`math.erf` over 20,001 points of [0, 4] (iteratively reweighted by 1/Q); the resulting
maximum error is 1.1e-8 absolute. The evaluation runs in float64: in float32 the rounding
of the Horner steps alone reaches 3.4e-7. tests/engine/encoder/test_erf.py compares
against `math.erf` on a dense grid (the brief asks <= 1e-7).

GELU is evaluated in slices of `GELU_SLICE_VALUES` values so that the float64 temporaries
stay in cache and bounded in memory whatever the batch.
"""
from __future__ import annotations

import math

import numpy as np

ERF_CLIP = 4.0
ERF_P = (1.1283791681579323, 0.1854368140320832, 0.05416739963055917,
         0.003835385969320058, 0.0003718957150843742, 4.475082131971675e-06,
         -1.2140018768036498e-08)                                  # t^0 .. t^6
ERF_Q = (1.0, 0.49767247378720986, 0.11389512018914122, 0.015407216452713417,
         0.0012942459502010683, 6.111685343587574e-05)            # t^0 .. t^5
GELU_SLICE_VALUES = 1 << 15        # 256 KiB of float64 per temporary
INV_SQRT2 = 1.0 / math.sqrt(2.0)


def _horner(coefficients: tuple[float, ...], t: np.ndarray) -> np.ndarray:
    """sum(c_i * t^i), highest power first, in t's dtype."""
    acc = np.full_like(t, coefficients[-1])
    for c in coefficients[-2::-1]:
        acc *= t
        acc += c
    return acc


def erf(x: np.ndarray) -> np.ndarray:
    """erf of every value, float64 out (max error 1.1e-8 absolute)."""
    clipped = np.clip(np.asarray(x, dtype=np.float64), -ERF_CLIP, ERF_CLIP)
    t = clipped * clipped
    return clipped * _horner(ERF_P, t) / _horner(ERF_Q, t)


def gelu_erf_(x: np.ndarray) -> np.ndarray:
    """GELU(x) = x/2 * (1 + erf(x/sqrt(2))) in place on a float32 array; returns x."""
    flat = x.reshape(-1)                       # a view: x must be contiguous
    for start in range(0, flat.size, GELU_SLICE_VALUES):
        part = flat[start:start + GELU_SLICE_VALUES]
        wide = part.astype(np.float64)
        part[:] = wide * 0.5 * (1.0 + erf(wide * INV_SQRT2))
    return x
