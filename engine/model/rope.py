"""Rotary position embedding frequencies: plain, Llama 3 scaled, or divided per pair (GGUF).

Every family rotates pair i of a head by the angle `position * inv_freq[i]`; the families
differ only in `inv_freq` [hd/2]:

* plain: `1 / theta**(2i/hd)`, computed in float32 as Hugging Face does;
* Llama 3 (`rope_type: "llama3"`): high frequencies (short wavelengths) kept, low ones
  divided by `factor`, the band between blended smoothly (transformers'
  `_compute_llama3_parameters`, same float32 order of operations);
* a GGUF's `rope_freqs` tensor: llama.cpp stores Llama 3 scaling as per-pair divisors
  (`inv_freq[i] / rope_freqs[i]`) and says `rope.scaling.type = none`.

Angles are `position * inv_freq` in float32 too (what transformers does): measured against
the oracle logits this is closer than computing them in float64.
"""
from __future__ import annotations

import math

import numpy as np

from engine.model.spec import FamilyOptions, Llama3RopeScaling

F32 = np.float32


def plain_inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """1 / theta**(2i/hd) for i < hd/2, float32 [hd/2]."""
    pair = np.arange(0, head_dim, 2, dtype=F32) / F32(head_dim)          # [hd/2]
    return (F32(1.0) / (F32(theta) ** pair)).astype(F32)


def llama3_inv_freq(inv_freq: np.ndarray, scaling: Llama3RopeScaling) -> np.ndarray:
    """Llama 3's scaled frequencies [hd/2] from the plain ones [hd/2] (float32 throughout)."""
    old_len = float(scaling.original_max_positions)
    low, high, factor = scaling.low_freq_factor, scaling.high_freq_factor, scaling.factor
    low_freq_wavelen = old_len / low            # longer waves than this: divided by factor
    high_freq_wavelen = old_len / high          # shorter waves than this: kept
    wavelen = F32(2 * math.pi) / inv_freq                                # [hd/2]
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / F32(factor), inv_freq).astype(F32)
    smooth = ((F32(old_len) / wavelen - F32(low)) / F32(high - low)).astype(F32)   # [hd/2]
    smoothed = (F32(1) - smooth) * scaled / F32(factor) + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, scaled).astype(F32)


def inv_freq_for(head_dim: int, theta: float, options: FamilyOptions) -> np.ndarray:
    """The family's RoPE inverse frequencies, float32 [hd/2]."""
    inv_freq = plain_inv_freq(head_dim, theta)
    if options.rope_scaling is not None:
        inv_freq = llama3_inv_freq(inv_freq, options.rope_scaling)
    if options.rope_freq_divisors is not None:
        inv_freq = (inv_freq / np.asarray(options.rope_freq_divisors, dtype=F32)).astype(F32)
    return inv_freq


def cos_sin(positions, inv_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) of `position * inv_freq`, each float32 [n, hd/2]."""
    angles = np.asarray(positions, dtype=F32)[:, None] * inv_freq[None, :]   # [n, hd/2]
    return np.cos(angles), np.sin(angles)
