"""What a perfect numpy engine could serve for the rows a load really needed: the bound
beside the roofline.

The roofline (`../shared/tools/roofline.py`) times B rows per step, every row sampling. A
served load at B streams computes more than that: besides the B decode rows, each step
carries the prompt rows of the requests that arrived (they need no logits), and attention
reads every decode row's cached K/V, which the roofline does not count. So this module
times, in the session that measured the engine:

    mix step      the roofline's own maths (fused QKV, O, gate|up, down matmuls, the norms,
                  the LM head) for the step the engine actually ran on average:
                  rows = decode rows + prompt rows, logits only for the rows that sampled
    K/V floor     the bytes attention must read at least (every decode row's context, K and
                  V, every layer, float32), at this machine's measured read bandwidth (both cores)

    bound tok/s   sampled rows / (mix step + K/V floor)
    roofline      the same maths on B rows that all sample, timed in turn with the mix
                  step (the host is shared: a ratio of steps timed apart drifts)

A numpy float32 engine doing this work is not expected to beat the bound: it counts no
softmax, RoPE, K/V writes, sampling or Python, and reads the K/V once at full bandwidth. The engine's
tok/s over the bound is its efficiency; the bound over the roofline is the ratio a
perfect engine would reach on this load.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

F32 = np.float32
F32_BYTES = 4
MIX_REPEATS = 5                      # timed steps per mix; the median is kept
BANDWIDTH_BYTES = 256 * 2**20        # the read-bandwidth probe (well past the L3 cache)
BANDWIDTH_REPEATS = 5
NORM_EPS = F32(1e-5)


@dataclass(frozen=True)
class ModelShape:
    """The matmul shapes of a Llama (from the served model's config)."""
    hidden: int                      # d
    intermediate: int                # ff
    layers: int
    vocab: int
    kv_size: int                     # columns of K (and of V): KV heads * head_dim

    @classmethod
    def of(cls, config) -> "ModelShape":
        return cls(config.hidden_size, config.intermediate_size, config.num_layers,
                   config.vocab_size, config.kv_size)

    def kv_bytes_per_position(self) -> int:
        """K and V of one cached position over all layers, float32."""
        return self.layers * 2 * self.kv_size * F32_BYTES


# The shapes ../shared/tools/roofline.py times (SmolLM2-135M): for a client that has no model.
ROOFLINE_SHAPE = ModelShape(hidden=576, intermediate=1536, layers=30, vocab=49152, kv_size=3 * 64)


@dataclass
class StepMix:
    """What the engine computed per step over a window (sums; `per_step` averages them)."""
    steps: int = 0
    rows: int = 0                    # every computed row: decode, prompt, drafts
    sampled_rows: int = 0            # rows that produced an output token
    context_positions: int = 0       # cached positions the decode rows attended over

    def per_step(self) -> tuple[float, float, float]:
        n = max(self.steps, 1)
        return self.rows / n, self.sampled_rows / n, self.context_positions / n


@dataclass(frozen=True)
class Bound:
    """One mix's bound and the roofline step timed beside it (seconds; rates derived)."""
    sampled_rows: float              # per step, on average
    mix_step_s: float                # the roofline maths on the run's average step
    kv_floor_s: float                # its K/V reads at the measured bandwidth
    read_bytes_s: float
    batch: int
    roofline_step_s: float           # the same maths on `batch` rows all sampling, timed in turn

    @property
    def tok_s(self) -> float:
        return self.sampled_rows / (self.mix_step_s + self.kv_floor_s)

    @property
    def roofline_tok_s(self) -> float:
        return self.batch / self.roofline_step_s

    @property
    def ratio(self) -> float:
        """What a perfect engine reaches on this load, as a share of the roofline."""
        return self.tok_s / self.roofline_tok_s


class MixCeiling:
    """Random weights of the model's shapes and the roofline's step, for any row mix."""

    def __init__(self, shape: ModelShape, seed: int = 0):
        d, ff = shape.hidden, shape.intermediate
        rng = np.random.default_rng(seed)

        def weight(rows: int, cols: int) -> np.ndarray:
            return rng.standard_normal((rows, cols), dtype=F32) * F32(0.02)
        self.shape = shape
        self.layers = [(weight(d, d + 2 * shape.kv_size), weight(d, d), weight(d, 2 * ff), weight(ff, d))
                       for _ in range(shape.layers)]             # wqkv, wo, w_gate_up, w_down
        self.embed = weight(shape.vocab, d)                       # [V, d], the LM head read as E^T
        self.rng = rng

    def steps_s(self, shapes: list[tuple[int, int]]) -> list[float]:
        """Median seconds of the roofline's step for each (rows, sampled rows) shape; the
        shapes take turns, so a noisy neighbour slows them alike and their ratio holds."""
        for rows, sampled in shapes:
            self._step(rows, sampled)                             # warm
        times: list[list[float]] = [[] for _ in shapes]
        for _ in range(MIX_REPEATS):
            for (rows, sampled), kept in zip(shapes, times):
                start = time.perf_counter()
                self._step(rows, sampled)
                kept.append(time.perf_counter() - start)
        return [sorted(kept)[len(kept) // 2] for kept in times]

    def _step(self, rows: int, sampled_rows: int) -> np.ndarray:
        d, ff = self.shape.hidden, self.shape.intermediate
        x = self.rng.standard_normal((rows, d), dtype=F32)                    # [N, d]
        for wqkv, wo, w_gate_up, w_down in self.layers:
            h = _rms(x) @ wqkv                                                # [N, d + 2*kv]
            x = x + h[:, :d] @ wo                                             # attention output stand-in
            gate_up = _rms(x) @ w_gate_up                                     # [N, 2*ff]
            gate, up = gate_up[:, :ff], gate_up[:, ff:]
            x = x + ((gate / (1 + np.exp(-gate))) * up) @ w_down              # [N, d]
        return _rms(x[:sampled_rows]) @ self.embed.T                          # [R, V]

    def bound(self, mix: StepMix, batch: int, read_bytes_s: float | None = None) -> Bound:
        """The bound of `mix`'s average step beside the roofline step at `batch` rows; the
        read bandwidth is measured unless given."""
        rows, sampled, positions = mix.per_step()
        mix_s, roofline_s = self.steps_s([(max(1, round(rows)), max(1, round(sampled))), (batch, batch)])
        read_bytes_s = read_bytes_s or read_bandwidth()
        floor_s = positions * self.shape.kv_bytes_per_position() / read_bytes_s
        return Bound(sampled, mix_s, floor_s, read_bytes_s, batch, roofline_s)


def bound_row(tok_s: float, mix: StepMix, bound: Bound) -> dict:
    """A benchmark row's fields for its bound: the mix per step, the bound, its ratio to the
    roofline timed beside it, and the engine's `tok_s` as a share of the bound."""
    rows, sampled, positions = mix.per_step()
    return {"rows_per_step": round(rows, 1), "sampled_per_step": round(sampled, 1),
            "context_per_step": round(positions), "mix_step_ms": round(bound.mix_step_s * 1e3, 1),
            "roofline_step_ms": round(bound.roofline_step_s * 1e3, 1),
            "kv_floor_ms": round(bound.kv_floor_s * 1e3, 1), "read_gb_s": round(bound.read_bytes_s / 1e9, 1),
            "bound_tok_s": round(bound.tok_s, 1), "bound_ratio": round(bound.ratio, 3),
            "of_bound": round(tok_s / bound.tok_s, 3)}


def _rms(x: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + NORM_EPS)


def read_bandwidth() -> float:
    """Bytes per second of both cores summing halves of an array far larger than the caches
    (best of 5): the most the engine's two threads could stream (one core alone gets less)."""
    a = np.ones(BANDWIDTH_BYTES // 4, dtype=F32)
    half = a.size // 2
    best = float("inf")
    with ThreadPoolExecutor(max_workers=1) as helper:
        for _ in range(BANDWIDTH_REPEATS):
            start = time.perf_counter()
            other = helper.submit(a[half:].sum)
            a[:half].sum()
            other.result()
            best = min(best, time.perf_counter() - start)
    return a.nbytes / best
