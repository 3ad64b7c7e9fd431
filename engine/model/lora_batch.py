"""Rows of one batch on different adapters: the LoRA products of a step, grouped per adapter.

A step computes every scheduled row in one activation matrix `x [N, d]`
(engine/core/runner.py); a row belongs to a sequence, and a sequence may run on a LoRA
adapter (engine/model/lora.py) or on the plain base. The base weights' matmul still runs
ONCE for all N rows; then, for each adapter present in the step, its low-rank product runs
on that adapter's rows only and is added to their outputs (the grouping of Punica and
S-LoRA; numpy has no segmented gemm, so it is a loop over the step's adapters):

    out = x @ W                              [N, in] @ [in, out]   every row, once
    out[rows] += (x[rows] @ a) @ b           [n_a, in] @ [in, R] @ [R, out], per adapter

Rows without an adapter get nothing added: a batch of base rows alone computes exactly
what it computed before adapters existed (`LoraBatch.of_chunks` then returns None).

The interface a scheduler feeds: a `Chunk` (engine/core/chunk.py) carries its sequence's
adapter (`Chunk.adapter`, a `LoraAdapter`; None for the base), and the runner turns the
step's chunks into a `LoraBatch` once per step -- each adapter's rows, a slice where they
are one run -- that every layer reuses through `LoraBatch.layer(i)`. How many different
adapters one step may hold (a `max_loras`) is the scheduler's choice; `num_adapters` says
how many this one has.

A step whose rows ALL run on one adapter (`sole_adapter`) is not grouped: the runner runs
it on that adapter's merged weights (engine/model/lora_merge.py), where nothing is added.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.model.lora import LoraAdapter, LowRank

Rows = slice | np.ndarray           # row indices into x [N, d]: a run, or an index array [n_a]


@dataclass(frozen=True, slots=True)
class RowsProduct:
    """One adapter's product of one fused weight, and the rows it applies to."""
    rows: Rows
    product: LowRank


@dataclass(frozen=True, slots=True)
class LayerLora:
    """A layer's products for this step, per fused weight (empty: no adapter changes it)."""
    qkv: tuple[RowsProduct, ...]
    o: tuple[RowsProduct, ...]
    gate_up: tuple[RowsProduct, ...]
    down: tuple[RowsProduct, ...]


@dataclass(frozen=True, slots=True)
class AdapterRows:
    adapter: LoraAdapter
    rows: Rows


@dataclass(frozen=True, slots=True)
class LoraBatch:
    """The adapters of one step and the rows each owns, in first-seen order."""
    groups: tuple[AdapterRows, ...]

    @staticmethod
    def of_chunks(adapters: Sequence[LoraAdapter | None],
                  num_rows: Sequence[int]) -> LoraBatch | None:
        """Chunk i has `num_rows[i]` consecutive rows (chunk order) on `adapters[i]`; None
        when no chunk has an adapter."""
        spans: dict[LoraAdapter, list[tuple[int, int]]] = {}
        first = 0
        for adapter, count in zip(adapters, num_rows):
            if adapter is not None and count:
                spans.setdefault(adapter, []).append((first, first + count))
            first += count
        if not spans:
            return None
        return LoraBatch(tuple(AdapterRows(adapter, _rows(runs))
                               for adapter, runs in spans.items()))

    @property
    def num_adapters(self) -> int:
        return len(self.groups)

    def sole_adapter(self, num_rows: int) -> LoraAdapter | None:
        """The adapter every one of the step's `num_rows` rows runs on; None when the step
        also holds base rows or another adapter (engine/model/lora_merge.py)."""
        if len(self.groups) != 1:
            return None
        rows = self.groups[0].rows                  # all N rows: one run, so a slice
        every_row = isinstance(rows, slice) and rows == slice(0, num_rows)
        return self.groups[0].adapter if every_row else None

    def layer(self, index: int) -> LayerLora:
        """Layer `index`'s products, each with its adapter's rows."""
        found: dict[str, list[RowsProduct]] = {"qkv": [], "o": [], "gate_up": [], "down": []}
        for group in self.groups:
            layer = group.adapter.layers[index]
            for target, products in found.items():
                product = getattr(layer, target)
                if product is not None:
                    products.append(RowsProduct(group.rows, product))
        return LayerLora(**{target: tuple(products) for target, products in found.items()})


def _rows(runs: list[tuple[int, int]]) -> Rows:
    """[start, stop) runs in increasing order -> one slice if they touch, else indices."""
    if all(stop == runs[i + 1][0] for i, (_, stop) in enumerate(runs[:-1])):
        return slice(runs[0][0], runs[-1][1])
    return np.concatenate([np.arange(start, stop) for start, stop in runs])     # [n_a]


def add_low_rank(out: np.ndarray, x: np.ndarray, products: tuple[RowsProduct, ...]) -> None:
    """out[rows] += (x[rows] @ a) @ b for each adapter's rows, in place.

    x [N, in] are the inputs of the base's `out = x @ W` [N, out]; each product's rows
    are one adapter's (disjoint across products)."""
    for item in products:
        rows, low_rank = item.rows, item.product
        delta = (x[rows] @ low_rank.a) @ low_rank.b          # [n_a, in] @ [in, R] @ [R, out]
        out[rows] += delta                                   # [n_a, out]
