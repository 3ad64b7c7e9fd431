"""How a step's rows are grouped per adapter (engine/model/lora_batch.py), by hand-made values.

The numbers of the grouped products are checked against PEFT and against a numpy merge in
test_lora_oracle.py and test_lora_rules.py; this checks the bookkeeping they rely on."""
from __future__ import annotations

import numpy as np

from engine.model.lora import LoraAdapter, LoraLayer, LowRank
from engine.model.lora_batch import LoraBatch, RowsProduct, add_low_rank


def _adapter(name: str, layers: tuple[LoraLayer, ...]) -> LoraAdapter:
    return LoraAdapter(name=name, path="", layers=layers, modules=(), max_rank=1,
                       num_parameters=0)


def _low_rank(in_dim: int, out_dim: int, value: float) -> LowRank:
    return LowRank(a=np.ones((in_dim, 1), np.float32), b=np.full((1, out_dim), value, np.float32))


def test_a_step_without_adapters_has_no_batch():
    assert LoraBatch.of_chunks([None, None], [3, 1]) is None
    assert LoraBatch.of_chunks([], []) is None


def test_an_adapters_rows_are_a_slice_when_they_touch_and_indices_when_not():
    one, two = _adapter("one", ()), _adapter("two", ())
    # chunks: one [0, 3), two [3, 4), base [4, 6), one [6, 7), one [7, 9)
    batch = LoraBatch.of_chunks([one, two, None, one, one], [3, 1, 2, 1, 2])
    assert batch.num_adapters == 2
    groups = {g.adapter.name: g.rows for g in batch.groups}
    assert groups["two"] == slice(3, 4)
    assert list(groups["one"]) == [0, 1, 2, 6, 7, 8]
    touching = LoraBatch.of_chunks([None, one, one], [2, 1, 4])
    assert touching.groups[0].rows == slice(2, 7)


def test_a_layer_lists_only_the_weights_each_adapter_changes():
    one = _adapter("one", (LoraLayer(qkv=_low_rank(2, 3, 1.0)), LoraLayer()))
    two = _adapter("two", (LoraLayer(qkv=_low_rank(2, 3, 2.0), down=_low_rank(4, 2, 1.0)),
                           LoraLayer(o=_low_rank(3, 2, 1.0))))
    batch = LoraBatch.of_chunks([one, two], [1, 2])
    first, second = batch.layer(0), batch.layer(1)
    assert [p.rows for p in first.qkv] == [slice(0, 1), slice(1, 3)]
    assert [p.rows for p in first.down] == [slice(1, 3)] and first.o == () == first.gate_up
    assert [p.rows for p in second.o] == [slice(1, 3)] and second.qkv == ()


def test_products_are_added_on_their_rows_only():
    out = np.zeros((4, 3), np.float32)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)                  # row sums 1, 5, 9, 13
    products = (RowsProduct(slice(0, 1), _low_rank(2, 3, 1.0)),
                RowsProduct(np.array([2, 3]), _low_rank(2, 3, 10.0)))
    add_low_rank(out, x, products)
    np.testing.assert_array_equal(out[:, 0], [1, 0, 90, 130])          # row 1: the base's
