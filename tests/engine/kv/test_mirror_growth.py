"""The decode mirror builds its next capacity ahead of need, one layer per step, so no
decode step copies the whole mirror (a ~1 s worst stream gap was such a step)."""
import numpy as np

from engine.core.chunk import Chunk
from engine.core.runner import ModelRunner
from engine.kv.mirror import GROW_AHEAD_FRACTION, DecodeMirror
from engine.kv.pools import KVCache
from tests.engine.core.engine_models import logits_of, random_model

BS = 4
LAYERS = 6


def _decode_run(steps: int):
    """One sequence decoding from position 100 past 256 positions; yields (mirror, logits, dense row)."""
    model = random_model(seed=8, layers=LAYERS, max_pos=512)
    rng = np.random.default_rng(3)
    toks = list(map(int, rng.integers(0, 64, 100 + steps)))
    table = tuple(range(0, (100 + steps) // BS + 2))
    run = ModelRunner(model.config, model.weights, KVCache(model.config, len(table), BS), 512,
                      mirror_bytes=1 << 26)
    dense = logits_of(model, toks)
    run.forward([Chunk(tuple(toks[:100]), 0, table, 0, 0)])
    for pos in range(100, 100 + steps):
        got = run.forward([Chunk((toks[pos],), pos, table, 1, 0)])
        yield run.mirror, got[0], dense[pos]


def test_no_decode_step_regrows_more_than_one_layer_after_the_first():
    grown_before, capacities = None, set()
    for mirror, got, want in _decode_run(200):           # positions 100..299: past 128 and 256
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)   # a stale row is off by units
        if grown_before is not None:
            assert mirror.layers_grown_total - grown_before <= 1
        grown_before = mirror.layers_grown_total
        capacities.add(mirror.cap_tokens)
    assert max(capacities) >= 512 and len(capacities) >= 3   # it grew twice, a layer at a time


def test_a_need_beyond_the_capacity_being_built_grows_every_layer_at_once():
    model = random_model(seed=9, layers=LAYERS)
    mirror = DecodeMirror(KVCache(model.config, 8, BS), LAYERS, 1 << 26)
    assert mirror._reserve(2, 100) and mirror.cap_tokens == 128
    mirror._grow_ahead(2, int(128 * GROW_AHEAD_FRACTION) + 1)   # starts building 256: one layer
    assert mirror.cap_tokens == 128 and mirror.k[0].shape[2] == 256
    assert mirror._reserve(2, 300)                               # outruns it: all layers now
    assert mirror.cap_tokens >= 300 and len({k.shape for k in mirror.k}) == 1
