"""The paged, batched runner equals the dense reference forward, row for row."""
import numpy as np
import pytest

from engine.model import llama as model_mod
from engine.kv.pools import KVCache
from engine.core.chunk import Chunk
from engine.core.runner import ModelRunner
from tests.engine.core.engine_models import logits_of, random_model

BS = 4


def make_runner(model, num_blocks=64):
    return ModelRunner(model.config, model.weights, KVCache(model.config, num_blocks, BS), 256)


def test_mixed_batch_of_prefill_pieces_and_decode_rows_matches_dense():
    model = random_model()
    rng = np.random.default_rng(3)
    seqs = [list(map(int, rng.integers(0, 64, n))) for n in (9, 13, 6, 6)]
    tables = [tuple(range(i * 8, i * 8 + 8)) for i in range(4)]     # private blocks, scattered order
    tables[1] = tuple(reversed(tables[1]))
    run = make_runner(model)
    # step 1: seq 0 whole prompt but last token, seq 1 first 5 tokens, seq 2 + 3 all but last
    first = [8, 5, 5, 5]
    run.forward([Chunk(tuple(s[:n]), 0, t, 0) for s, t, n in zip(seqs, tables, first)])
    # step 2: seq 0 decodes, seq 1 continues a piece (8 tokens, all rows sample), seq 2/3 decode
    chunks = [Chunk((seqs[0][8],), 8, tables[0], 1),
              Chunk(tuple(seqs[1][5:13]), 5, tables[1], 8),
              Chunk((seqs[2][5],), 5, tables[2], 1),
              Chunk((seqs[3][5],), 5, tables[3], 1)]
    got = run.forward(chunks)
    dense = [logits_of(model, s) for s in seqs]
    want = np.concatenate([dense[0][8:9], dense[1][5:13], dense[2][5:6], dense[3][5:6]])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_only_requested_rows_get_logits():
    model = random_model()
    run = make_runner(model)
    got = run.forward([Chunk((1, 2, 3), 0, (0,), 0), Chunk((4, 5, 6, 7, 8), 0, (1, 2), 2)])
    want = logits_of(model, [4, 5, 6, 7, 8])[3:]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_long_prefill_cut_into_score_sized_pieces_matches_dense(monkeypatch):
    monkeypatch.setattr(model_mod, "MAX_SCORE_ELEMENTS", 4 * 40)      # forces ~1-row pieces
    model = random_model()
    ids = list(range(3, 40))
    got = make_runner(model).forward([Chunk(tuple(ids), 0, tuple(range(10)), len(ids))])
    np.testing.assert_allclose(got, logits_of(model, ids), rtol=1e-4, atol=1e-4)


def test_equal_length_pieces_split_into_groups_whose_scores_fit(monkeypatch):
    limit = 2 * 4 * 3 * 8                       # two members of 3 queries, 4 heads, keys up to 8
    monkeypatch.setattr(model_mod, "MAX_SCORE_ELEMENTS", limit)
    model = random_model()
    rng = np.random.default_rng(5)
    seqs = [list(map(int, rng.integers(0, 64, 8))) for _ in range(4)]
    tables = [tuple(range(i * 2, i * 2 + 2)) for i in range(4)]
    run = make_runner(model)
    run.forward([Chunk(tuple(s[:5]), 0, t, 0) for s, t in zip(seqs, tables)])
    chunks = [Chunk(tuple(s[5:]), 5, t, 3) for s, t in zip(seqs, tables)]
    groups = run.planner.plan(chunks)
    assert sorted(g.batch for g in groups) == [2, 2]
    for g in groups:
        assert g.batch * model.config.num_heads * g.num_queries * 8 <= limit
    got = run.forward(chunks)
    want = np.concatenate([logits_of(model, s)[5:] for s in seqs])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 1), (6, 2)])
def test_grouped_query_layouts_match_dense(heads, kv_heads):
    model = random_model(heads=heads, kv_heads=kv_heads, seed=heads * 10 + kv_heads)
    ids = [5, 9, 11, 2, 7, 7, 1]
    run = make_runner(model)
    run.forward([Chunk(tuple(ids[:4]), 0, (3, 1), 0)])
    got = run.forward([Chunk(tuple(ids[4:]), 4, (3, 1), 3)])
    np.testing.assert_allclose(got, logits_of(model, ids)[4:], rtol=1e-4, atol=1e-4)


def test_zero_layer_model_needs_no_cache():
    from tests.engine.core.engine_models import succ_model
    model = succ_model()
    run = ModelRunner(model.config, model.weights, KVCache(model.config, 4, BS), 64)
    got = run.forward([Chunk((97, 98), 0, (0,), 2)])
    assert list(got.argmax(axis=1)) == [98, 99]


def test_decode_mirror_matches_dense_as_sequences_join_leave_and_verify_drafts():
    model = random_model(seed=4)
    rng = np.random.default_rng(9)
    toks = [list(map(int, rng.integers(0, 64, 16))) for _ in range(3)]
    tables = [tuple(range(0, 5)), tuple(range(10, 15)), tuple(range(20, 25))]
    run = ModelRunner(model.config, model.weights, KVCache(model.config, 32, BS), 256, mirror_bytes=1 << 24)
    dense = [logits_of(model, t) for t in toks]

    def step(items):                       # items: (seq, start, n, num_logits)
        got = run.forward([Chunk(tuple(toks[s][a:a + n]), a, tables[s], k, s) for s, a, n, k in items])
        want = np.concatenate([dense[s][a + n - k:a + n] for s, a, n, k in items if k])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    step([(0, 0, 5, 1), (1, 0, 7, 1)])
    step([(0, 5, 1, 1), (1, 7, 1, 1)])                # both decode through the mirror
    assert set(run.mirror.row_of) == {0, 1}
    step([(0, 6, 1, 1), (2, 0, 4, 1)])                # 1 pauses (row dropped), 2 prefills
    assert set(run.mirror.row_of) == {0}
    step([(0, 7, 3, 3), (2, 4, 1, 1), (1, 8, 1, 1)])  # 0 verifies drafts (paged path), 1 rejoins
    assert set(run.mirror.row_of) == {1, 2}
    step([(0, 8, 1, 1), (1, 9, 1, 1), (2, 5, 1, 1)])  # 0 rejoins after only one draft was kept
    step([(0, 9, 1, 1), (1, 10, 1, 1), (2, 6, 1, 1)])


def test_decode_mirror_over_budget_falls_back_to_gathering():
    model = random_model(seed=4)
    run = ModelRunner(model.config, model.weights, KVCache(model.config, 32, BS), 256, mirror_bytes=64)
    ids = [3, 1, 4, 1, 5, 9]
    run.forward([Chunk(tuple(ids[:5]), 0, (0, 1), 0, 7)])
    got = run.forward([Chunk((ids[5],), 5, (0, 1), 1, 7)])
    np.testing.assert_allclose(got, logits_of(model, ids)[5:], rtol=1e-4, atol=1e-4)
    assert run.mirror.row_of == {}


def test_decode_mirror_with_equal_lengths_and_an_idle_row_matches_dense():
    model = random_model(seed=5)
    rng = np.random.default_rng(2)
    toks = [list(map(int, rng.integers(0, 64, 12))) for _ in range(2)]
    tables = [tuple(range(0, 3)), tuple(range(3, 6))]
    run = ModelRunner(model.config, model.weights, KVCache(model.config, 8, BS), 64, mirror_bytes=1 << 22)
    dense = [logits_of(model, t) for t in toks]
    run.forward([Chunk(tuple(t[:6]), 0, tb, 0, i) for i, (t, tb) in enumerate(zip(toks, tables))])
    for pos in (6, 7):                                   # equal lengths: no mask at all
        got = run.forward([Chunk((t[pos],), pos, tb, 1, i) for i, (t, tb) in enumerate(zip(toks, tables))])
        np.testing.assert_allclose(got, np.stack([d[pos] for d in dense]), rtol=1e-4, atol=1e-4)
    got = run.forward([Chunk((toks[1][8],), 8, tables[1], 1, 1)])   # row 0 now idle
    assert run.mirror.num_rows == 2 and list(run.mirror.row_of) == [1]
    np.testing.assert_allclose(got, dense[1][8:9], rtol=1e-4, atol=1e-4)


def test_decode_mirror_keeps_its_rows_when_it_grows_past_its_capacity():
    model = random_model(seed=6, max_pos=512)
    rng = np.random.default_rng(4)
    toks = [list(map(int, rng.integers(0, 64, 150))) for _ in range(3)]
    tables = [tuple(range(i * 40, i * 40 + 38)) for i in range(3)]
    run = ModelRunner(model.config, model.weights, KVCache(model.config, 120, BS), 512, mirror_bytes=1 << 26)
    dense = [logits_of(model, t) for t in toks]
    run.forward([Chunk(tuple(toks[0][:120]), 0, tables[0], 0, 0)])
    run.forward([Chunk(tuple(toks[1][:5]), 0, tables[1], 0, 1), Chunk(tuple(toks[2][:5]), 0, tables[2], 0, 2)])
    starts = {0: 120}
    for step in range(14):                               # sequence 0 crosses 128 positions
        if step == 3:
            starts.update({1: 5, 2: 5})                  # two more rows join: the rows grow too
        items = sorted(starts.items())
        got = run.forward([Chunk((toks[s][a],), a, tables[s], 1, s) for s, a in items])
        np.testing.assert_allclose(got, np.stack([dense[s][a] for s, a in items]), rtol=1e-4, atol=1e-4)
        starts = {s: a + 1 for s, a in items}
    assert run.mirror.cap_tokens >= 256 and run.mirror.rows_cap >= 3


def test_kv_cache_nbytes_counts_every_pool_array():
    model = random_model(layers=3, kv_heads=2, head_dim=8)
    kv = KVCache(model.config, 5, BS)
    assert kv.nbytes == sum(a.nbytes for a in kv.k + kv.v) == 3 * 2 * 5 * BS * 2 * 8 * 4


def test_mirror_growth_that_cannot_double_takes_all_the_rows_the_budget_holds():
    from engine.kv.mirror import CAPACITY_STEP_TOKENS, DecodeMirror
    from engine.kv.pools import block_bytes
    model = random_model(seed=21)
    kv = KVCache(model.config, 8, 4)
    row_bytes = block_bytes(model.config, 1)
    budget = 10 * CAPACITY_STEP_TOKENS * row_bytes                 # 10 rows of 128 positions
    mirror = DecodeMirror(kv, model.config.num_layers, budget)
    assert mirror._reserve(6, 100) and (mirror.rows_cap, mirror.cap_tokens) == (6, 128)
    assert mirror._reserve(7, 100)                                  # 12 rows do not fit: 10 do
    assert (mirror.rows_cap, mirror.cap_tokens) == (10, 128)
    assert not mirror._reserve(11, 100)
