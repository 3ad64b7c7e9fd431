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

Any family: the shapes come from the served model's config (`ModelShape.of`), with the
query width apart from the hidden size (Gemma 3: 4 heads x 256 = 1024 > 640) and the
sliding layers, whose K/V floor counts only the positions inside their window
(`kv_read_bytes`). `parts_s` times the layer stack and the LM head apart, for a step's
breakdown beside the engine's own (bench/step_rows.py `--parts`), each product in the shape
`engine/model/project.py` picks for its row count (plain `x @ w` runs 2-7 rows slowly).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from typing import Callable

import numpy as np

from engine.model.project import project

F32 = np.float32
F32_BYTES = 4
MIX_REPEATS = 5                      # timed steps per mix; the median is kept
BANDWIDTH_BYTES = 256 * 2**20        # the read-bandwidth probe (well past the L3 cache)
BANDWIDTH_REPEATS = 5
NORM_EPS = F32(1e-5)


@dataclass(frozen=True)
class ModelShape:
    """The matmul shapes of a decoder (from the served model's config)."""
    hidden: int                      # d
    intermediate: int                # ff
    layers: int
    vocab: int
    kv_size: int                     # columns of K (and of V): KV heads * head_dim
    q_size: int = 0                  # columns of Q: heads * head_dim (0: the hidden size)
    sliding_layers: int = 0          # layers that attend only over the last `window_tokens`
    window_tokens: int = 0

    @classmethod
    def of(cls, config) -> "ModelShape":
        options = config.options
        sliding = sum(options.layer_window(i) is not None for i in range(config.num_layers))
        return cls(config.hidden_size, config.intermediate_size, config.num_layers,
                   config.vocab_size, config.kv_size, q_size=config.q_size,
                   sliding_layers=sliding, window_tokens=options.sliding_window or 0)

    @property
    def query_width(self) -> int:
        return self.q_size or self.hidden

    def kv_bytes_per_position(self) -> int:
        """K and V of one cached position over all layers, float32."""
        return self.layers * 2 * self.kv_size * F32_BYTES

    def kv_read_bytes(self, contexts_tokens: list[int]) -> int:
        """The K/V bytes decode rows with these contexts must read at least: every layer
        reads K and V of each row's context, a sliding layer only its window's part."""
        per_layer_position = 2 * self.kv_size * F32_BYTES
        global_layers = self.layers - self.sliding_layers
        positions = sum(global_layers * c + self.sliding_layers * min(c, self.window_tokens)
                        for c in contexts_tokens)
        return positions * per_layer_position


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
        d, ff, q = shape.hidden, shape.intermediate, shape.query_width
        rng = np.random.default_rng(seed)

        def weight(rows: int, cols: int) -> np.ndarray:
            return rng.standard_normal((rows, cols), dtype=F32) * F32(0.02)
        self.shape = shape
        self.layers = [(weight(d, q + 2 * shape.kv_size), weight(q, d), weight(d, 2 * ff), weight(ff, d))
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

    def parts_s(self, rows: int, sampled_rows: int) -> tuple[float, float]:
        """Median seconds of the layer stack on `rows` rows and of the LM head on
        `sampled_rows`, each timed alone, taking turns: (layers_s, head_s)."""
        x = self.rng.standard_normal((rows, self.shape.hidden), dtype=F32)  # [N, d]
        parts = (lambda: self._layers(x, project), lambda: self._head(x[:sampled_rows], project))
        for part in parts:
            part()                                                            # warm
        times: list[list[float]] = [[], []]
        for _ in range(MIX_REPEATS):
            for part, kept in zip(parts, times):
                start = time.perf_counter()
                part()
                kept.append(time.perf_counter() - start)
        layers_s, head_s = (sorted(kept)[len(kept) // 2] for kept in times)
        return layers_s, head_s

    def _step(self, rows: int, sampled_rows: int) -> np.ndarray:
        x = self._layers(self.rng.standard_normal((rows, self.shape.hidden), dtype=F32))  # [N, d]
        return self._head(x[:sampled_rows])                                   # [R, V]

    def _layers(self, x: np.ndarray, matmul: Callable = np.matmul) -> np.ndarray:
        d, ff, q = self.shape.hidden, self.shape.intermediate, self.shape.query_width
        for wqkv, wo, w_gate_up, w_down in self.layers:
            h = matmul(_rms(x), wqkv)                                         # [N, q + 2*kv]
            x = x + matmul(h[:, :q], wo)                                      # attention output stand-in
            gate_up = matmul(_rms(x), w_gate_up)                              # [N, 2*ff]
            gate, up = gate_up[:, :ff], gate_up[:, ff:]
            x = x + matmul((gate / (1 + np.exp(-gate))) * up, w_down)         # [N, d]
        return x

    def _head(self, x: np.ndarray, matmul: Callable = np.matmul) -> np.ndarray:
        return matmul(_rms(x), self.embed.T)                                  # [R, d] -> [R, V]

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
