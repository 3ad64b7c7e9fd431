"""One adapter merged into a copy of the base's layers, for the steps that run on it alone.

A step whose rows all run on ONE adapter (no base rows, no other adapter) has no one to
share the grouped products of engine/model/lora_batch.py with: alone, a row pays each
layer's two small matmuls per fused weight and their bookkeeping on top of the base's
matmul. Such a step runs the layers over MERGED weights instead, PEFT's merge in the
engine's input-major fused layout (engine/model/lora.py: `b` carries the scaling):

    W'[in, out] = W[in, out] + a @ b          a [in, R], b [R, out]

so the step is the base's step on other arrays: one matmul per weight, nothing added.
Only the fused weights the adapter changes are copied; the others, the norms and the
biases are the base's own arrays. The base is never modified.

`MergedCache` keeps at most ONE merged adapter: built on the engine thread the first time a
step runs on that adapter alone (`for_step`), replaced when another adapter runs alone,
kept across mixed steps (they take the grouped path and leave it), and dropped when its
adapter is unloaded (`forget`); a forgotten adapter is never merged again, so its requests
still in flight finish on the grouped path. Memory: smol-135m with the oracle's adapter (q,
v, o and down on all 30 layers) copies wqkv, wo and w_down of every layer, 30 x (576 x 960
+ 576 x 576 + 1536 x 576) float32 = 212 MB beside the base's 425 MB of layers; an adapter
on all seven projections copies all of them, 425 MB. `MergedLayers.build_s` says what the
build cost: for smol-135m's oracle adapter 0.2 s in bench/lora_step.py and 0.6-1.0 s in a
plain process, on the shared, busy 2-core machine; the step that builds pays it, so requests
that take turns on different adapters, one at a time, pay it on each switch
(`MergedCache.merges_built_total` counts them).
"""
from __future__ import annotations

import dataclasses
import time
import weakref
from dataclasses import dataclass

import numpy as np

from engine.model.lora import LoraAdapter, LoraLayer, LowRank
from engine.model.lora_batch import LoraBatch
from engine.model.spec import LayerWeights


@dataclass(frozen=True, eq=False)
class MergedLayers:
    """An adapter's layers with its products merged in: what a one-adapter step runs."""
    adapter: LoraAdapter
    layers: tuple[LayerWeights, ...]    # one per base layer; unchanged weights shared
    nbytes: int                         # the copied weights' bytes (shared ones not counted)
    build_s: float                      # how long the merge took


def merge_layers(base: tuple[LayerWeights, ...], adapter: LoraAdapter) -> MergedLayers:
    """`base` with `adapter`'s products added to copies of the fused weights it changes."""
    start_s = time.perf_counter()
    layers = tuple(_merged_layer(layer, lora) for layer, lora in zip(base, adapter.layers))
    copied = sum(merged.nbytes for original_layer, own in zip(base, layers)
                 for merged, original in _fused_pairs(own, original_layer) if merged is not original)
    return MergedLayers(adapter, layers, copied, time.perf_counter() - start_s)


def _merged_layer(layer: LayerWeights, lora: LoraLayer) -> LayerWeights:
    if lora.qkv is None and lora.o is None and lora.gate_up is None and lora.down is None:
        return layer                                            # the adapter leaves it alone
    return dataclasses.replace(layer, wqkv=_plus(layer.wqkv, lora.qkv), wo=_plus(layer.wo, lora.o),
                               w_gate_up=_plus(layer.w_gate_up, lora.gate_up),
                               w_down=_plus(layer.w_down, lora.down))


def _plus(w: np.ndarray, product: LowRank | None) -> np.ndarray:
    """w [in, out] + a @ b in a new array (one allocation), or w itself without a product."""
    if product is None:
        return w
    merged = product.a @ product.b                              # [in, R] @ [R, out]
    merged += w
    return merged


def _fused_pairs(own: LayerWeights, base: LayerWeights) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    return ((own.wqkv, base.wqkv), (own.wo, base.wo), (own.w_gate_up, base.w_gate_up),
            (own.w_down, base.w_down))


class MergedCache:
    """At most one merged adapter, and the counts an operator reads (engine stats).
    `enabled` False (`EngineConfig.lora_merge`): nothing is merged, every step grouped."""

    def __init__(self, base: tuple[LayerWeights, ...], *, enabled: bool = True):
        self.base = base
        self.enabled = enabled
        self.current: MergedLayers | None = None
        self.merged_steps_total = 0         # steps that ran on merged weights
        self.grouped_steps_total = 0        # steps with adapter rows that ran grouped
        self.merges_built_total = 0         # merges built (a switch of adapter builds one)
        # Unloaded adapters: never merged again (weak: the set keeps none of them alive).
        self._forgotten: weakref.WeakSet[LoraAdapter] = weakref.WeakSet()

    def for_step(self, batch: LoraBatch | None, num_rows: int) -> MergedLayers | None:
        """The merged layers this step runs on, or None: a step of base rows only (no
        batch), of several adapters, of an adapter beside base rows, or of an unloaded
        adapter takes the base's layers (and the grouped products, if any)."""
        if batch is None:
            return None
        sole = batch.sole_adapter(num_rows)
        if sole is None or not self.enabled or sole in self._forgotten:
            self.grouped_steps_total += 1
            return None
        if self.current is None or self.current.adapter is not sole:
            self.current = None                     # the old copy goes before the new one is built
            self.current = merge_layers(self.base, sole)
            self.merges_built_total += 1
        self.merged_steps_total += 1
        return self.current

    def forget(self, adapter: LoraAdapter) -> None:
        """The adapter was unloaded: free its merged copy, never merge it again."""
        self._forgotten.add(adapter)
        if self.current is not None and self.current.adapter is adapter:
            self.current = None

    @property
    def merged_adapter(self) -> str:
        """The merged adapter's name ("": none held)."""
        return "" if self.current is None else self.current.adapter.name

    @property
    def merged_bytes(self) -> int:
        return 0 if self.current is None else self.current.nbytes
