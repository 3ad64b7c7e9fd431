"""The window pool (engine/kv/window.py): a sequence's window table holds only what its
window reads, the prefix cache keeps committed window blocks until it needs the room, and a
prefix match stops where the window blocks its next query reads are gone."""
from __future__ import annotations

from engine.kv.blocks import BlockManager
from engine.kv.window import NO_BLOCK, WindowPool

BS, WINDOW = 4, 6


def test_drop_behind_releases_exactly_the_blocks_no_later_query_reads():
    pool = WindowPool(8, BS, WINDOW)
    table: list[int] = []
    assert pool.cover(table, 13)                       # positions 0..12: 4 blocks
    assert len(table) == 4 and pool.num_free_blocks == 4
    pool.drop_behind(table, 13)                        # a query at 13 reads 8..13: blocks 2, 3
    assert table[:2] == [NO_BLOCK, NO_BLOCK] and NO_BLOCK not in table[2:]
    assert pool.num_free_blocks == 6
    pool.drop_behind(table, 14)                        # still reads from 9: block 2 kept
    assert table[2] != NO_BLOCK


def test_cover_refuses_beyond_the_pool_and_leaves_the_table_as_it_was():
    pool = WindowPool(3, BS, WINDOW)
    table: list[int] = []
    assert not pool.cover(table, 4 * BS)
    assert table == [] and pool.num_free_blocks == 3


def test_the_tree_keeps_a_committed_window_block_until_the_room_is_needed():
    pool = WindowPool(3, BS, WINDOW)
    table: list[int] = []
    pool.cover(table, 2 * BS)
    assert pool.commit(100, table[0]) == table[0]      # node of global block 100
    kept = table[0]
    pool.drop_behind(table, 3 * BS)                    # the sequence no longer reads it
    assert pool.of_tree == {100: kept} and pool.num_cached_blocks == 1
    assert pool.num_available_blocks == 2              # the free one and the cached one
    fresh = pool.allocate(2)                           # needs the cached one too
    assert kept in fresh and pool.of_tree == {} and pool.evictions_total == 1


def test_a_second_commit_of_the_same_node_takes_the_trees_block():
    pool = WindowPool(4, BS, WINDOW)
    mine, theirs = pool.allocate(1)[0], pool.allocate(1)[0]
    pool.commit(7, theirs)
    assert pool.commit(7, mine) == theirs
    assert pool.ref_counts[mine] == 0 and pool.ref_counts[theirs] == 3   # two sequences + tree


def test_a_match_is_usable_only_as_far_as_its_windows_are_cached():
    pool = WindowPool(8, BS, WINDOW)
    table: list[int] = []
    pool.cover(table, 5 * BS)
    for node_block, window_block in zip((10, 11, 12, 13, 14), table):
        pool.commit(node_block, window_block)
    path = [10, 11, 12, 13, 14]
    assert pool.usable_prefix(path) == 5
    pool.release(table)
    pool.forget(13)                                    # the window block of block 3 is gone
    # starting at 20 reads 15..19 (block 3, 4): no; at 16 reads 11..15 (blocks 2, 3): no;
    # at 12 reads 7..11 (blocks 1, 2): yes
    assert pool.usable_prefix(path) == 3
    shared = pool.share(path[:3])
    assert shared[0] == NO_BLOCK and shared[1:] == [table[1], table[2]]


def test_the_block_managers_eviction_forgets_the_nodes_window_block():
    pool = WindowPool(4, BS, WINDOW)
    bm = BlockManager(2, BS, "radix", pool)
    table = bm.allocate(1)
    window_table = pool.allocate(1)
    node = bm.commit(bm.radix.root, (1, 2, 3, 4), table[0])
    pool.commit(node.block, window_table[0])
    bm.release(table)
    pool.release(window_table)
    assert pool.num_cached_blocks == 1
    bm.allocate(2)                                     # evicts the node
    assert pool.of_tree == {} and pool.num_free_blocks == 4
    assert bm.match_prefix([1, 2, 3, 4, 5], 1)[0] == []
