"""The engine's read-only pictures: StepRecord per step and the bounded EngineSnapshot."""
from engine.api import (BLOCK_CACHED, BLOCK_FREE, BLOCK_SHARED, BLOCK_USED, EngineConfig,
                        GenRequest)
from engine.core import snapshot
from engine.core.engine import Engine
from engine.kv.blocks import BlockManager
from tests.engine.core.engine_models import GREEDY, random_model, run_to_completion

CONFIG = EngineConfig(block_size=4, num_kv_blocks=32, max_num_seqs=4, max_batched_tokens=16,
                      prefill_chunk=8)


def test_block_states_tell_free_used_shared_and_cached():
    blocks = BlockManager(8, 2)
    root = blocks.radix.root
    table = blocks.allocate(3)                                  # [0, 1, 2], ref 1 each
    node = blocks.commit(root, (1, 2), table[0])
    blocks.commit(node, (3, 4), table[1])
    shared, _ = blocks.match_prefix([1, 2, 3, 4, 5], 2)         # blocks 0 and 1 now ref 2
    assert shared == [0, 1]
    blocks.release([table[2]])                                  # block 2: not in the tree -> free
    states = snapshot.build_snapshot([], [], blocks).block_states
    assert states == BLOCK_SHARED * 2 + BLOCK_FREE * 6
    blocks.release(shared)
    blocks.release(table[:2])                                   # both in the tree, unreferenced
    snap = snapshot.build_snapshot([], [], blocks)
    assert snap.block_states == BLOCK_CACHED * 2 + BLOCK_FREE * 6
    assert [(s.id, s.parent, s.num_blocks, s.blocks, s.refs) for s in snap.radix] == \
        [(0, -1, 2, (0, 1), (0, 0))]                            # one chain: one segment
    (fresh,) = blocks.allocate(1)
    states = snapshot.build_snapshot([], [], blocks).block_states
    assert states[fresh] == BLOCK_USED and states.count(BLOCK_USED) == 1


def test_radix_segments_split_at_branches_and_are_capped(monkeypatch):
    blocks = BlockManager(16, 1)
    table = blocks.allocate(5)
    a = blocks.commit(blocks.radix.root, (1,), table[0])
    b = blocks.commit(a, (2,), table[1])
    blocks.commit(b, (3,), table[2])                            # branch below b: 3 and 4
    blocks.commit(b, (4,), table[3])
    blocks.commit(blocks.radix.root, (9,), table[4])            # a second root segment
    segments = snapshot.build_snapshot([], [], blocks).radix
    by_id = {s.id: s for s in segments}
    assert by_id[table[0]].blocks == (table[0], table[1]) and by_id[table[0]].parent == -1
    assert by_id[table[2]].parent == by_id[table[3]].parent == table[0]
    assert by_id[table[4]].parent == -1 and len(segments) == 4
    assert all(s.refs == (1,) * len(s.blocks) for s in segments)
    monkeypatch.setattr(snapshot, "MAX_SNAPSHOT_SEGMENTS", 2)
    assert len(snapshot.build_snapshot([], [], blocks).radix) == 2


def test_running_and_waiting_sequences_are_counts_and_blocks_only():
    engine = Engine(random_model(), CONFIG)
    first = engine.add_request(GenRequest(prompt=tuple(range(1, 11)), params=GREEDY,
                                          max_tokens=3, priority=2))
    engine.add_request(GenRequest(prompt=(5, 6), params=GREEDY, max_tokens=3))
    engine.step()                                               # 8 + 2 tokens: both admitted
    snap = engine.snapshot()
    view = {s.id: s for s in snap.running}[first]
    assert (view.priority, view.prompt_tokens, view.computed_tokens, view.generated_tokens) == \
        (2, 10, 8, 0)
    assert view.num_blocks == 2 and len(view.blocks) == 2
    assert snap.block_states.count(BLOCK_USED) == 3 and snap.num_waiting == 0
    fields = {f for s in snap.running for f in s.__dataclass_fields__}
    assert "tokens" not in fields and "prompt" not in fields


def test_step_records_only_when_asked_with_ordered_phases_and_rows():
    engine = Engine(random_model(), CONFIG)
    engine.add_request(GenRequest(prompt=tuple(range(1, 13)), params=GREEDY, max_tokens=2))
    engine.step()
    assert engine.last_step is None                             # off by default: no record
    engine.record_steps = True
    engine.step()                                               # the last 4 prompt tokens, sample
    record = engine.last_step
    assert record.start_s <= record.scheduled_s <= record.forward_s <= record.end_s
    assert [(r.num_tokens, r.is_prefill) for r in record.rows] == [(4, True)]
    engine.step()                                               # one decode row
    assert [(r.num_tokens, r.is_prefill) for r in engine.last_step.rows] == [(1, False)]
    assert engine.last_step.step == record.step + 1
    assert (engine.last_step.prefill_rows, engine.last_step.decode_rows) == (0, 1)
    run_to_completion(engine)
