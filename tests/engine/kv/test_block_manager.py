"""Blocks, reference counts, the three block states and prefix reuse with LRU eviction."""
import pytest

from engine.errors import InvalidConfig
from engine.kv.blocks import BlockManager

BS = 4


def commit_all(bm, tokens, blocks):
    node = bm.radix.root
    for i, block in enumerate(blocks):
        node = bm.commit(node, tuple(tokens[i * BS:(i + 1) * BS]), block)
    return node


def states(bm):
    return bm.num_used_blocks, bm.num_cached_blocks, bm.num_free_blocks


def test_allocate_until_empty_then_none_and_release_returns_blocks():
    bm = BlockManager(3, BS, "none")
    a = bm.allocate(2)
    assert len(set(a)) == 2 and states(bm) == (2, 0, 1)
    assert bm.allocate(2) is None and states(bm) == (2, 0, 1)      # all-or-nothing
    bm.release(a)
    assert states(bm) == (0, 0, 3)


def test_grow_covers_positions_block_by_block():
    bm = BlockManager(4, BS, "none")
    table = []
    assert bm.grow(table, 1) and len(table) == 1
    assert bm.grow(table, 4) and len(table) == 1
    assert bm.grow(table, 5) and len(table) == 2
    assert not bm.grow(table, 17) and len(table) == 2              # needs 5 blocks of 4


def test_released_committed_blocks_are_cached_and_matched_again():
    bm = BlockManager(8, BS, "radix")
    tokens = list(range(10))
    table = bm.allocate(3)
    commit_all(bm, tokens, table[:2])                              # two full blocks
    bm.release(table)
    assert states(bm) == (0, 2, 6)
    blocks, node = bm.match_prefix(tokens + [99], 10)
    assert blocks == table[:2] and node.block == table[1]
    assert states(bm) == (2, 0, 6)
    assert bm.ref_counts[table[0]] == 1


def test_shared_blocks_are_reference_counted():
    bm = BlockManager(8, BS, "radix")
    tokens = list(range(8))
    table = bm.allocate(2)
    commit_all(bm, tokens, table)
    other, _ = bm.match_prefix(tokens, 2)
    assert other == table and bm.ref_counts[table[0]] == 2
    bm.release(table)
    assert states(bm) == (2, 0, 6)                                  # still held by the other
    bm.release(other)
    assert states(bm) == (0, 2, 6)


def test_allocation_evicts_least_recently_used_cached_leaf_first():
    bm = BlockManager(3, BS, "radix")
    a, b = bm.allocate(1), bm.allocate(1)
    commit_all(bm, [1, 1, 1, 1], a)
    commit_all(bm, [2, 2, 2, 2], b)
    bm.release(a)
    bm.release(b)                                                  # a released first: older
    bm.match_prefix([2, 2, 2, 2, 0], 1)                            # touch b: now b is in use
    fresh = bm.allocate(2)                                         # 1 free + must evict one
    assert fresh is not None and a[0] in fresh
    assert bm.evictions_total == 1
    assert bm.match_prefix([1, 1, 1, 1, 0], 1)[0] == []            # a is gone
    assert bm.allocate(1) is None                                  # b is referenced: not evictable


def test_prefix_cache_none_never_caches():
    bm = BlockManager(4, BS, "none")
    table = bm.allocate(1)
    assert bm.commit(None, (1, 2, 3, 4), table[0]) is None
    bm.release(table)
    assert states(bm) == (0, 0, 4)
    assert bm.match_prefix([1, 2, 3, 4, 5], 1) == ([], None)


def test_unknown_prefix_cache_mode_is_refused():
    with pytest.raises(ValueError):
        BlockManager(4, BS, "lru")
    with pytest.raises(InvalidConfig, match='prefix_cache: expected "radix" or "none"'):
        BlockManager(4, BS, "lru")


def test_committing_a_prefix_another_block_already_holds_swaps_to_the_shared_block():
    bm = BlockManager(4, BS, "radix")
    mine, theirs = bm.allocate(1), bm.allocate(1)
    commit_all(bm, [1, 2, 3, 4], theirs)
    node = bm.commit(bm.radix.root, (1, 2, 3, 4), mine[0])
    assert node.block == theirs[0]
    assert bm.ref_counts[theirs[0]] == 2 and bm.ref_counts[mine[0]] == 0
    assert states(bm) == (1, 0, 3)


def test_a_cached_chain_is_available_whole_and_evicted_leaf_first():
    """Only the chain's last block is a leaf, but evicting it frees its parent, and so on:
    all three count as available, and one allocation takes them all."""
    bm = BlockManager(3, BS, "radix")
    chain = bm.allocate(3)
    commit_all(bm, list(range(3 * BS)), chain)
    bm.release(chain)
    assert states(bm) == (0, 3, 0) and bm.radix.num_evictable == 1
    assert bm.num_available_blocks == 3
    assert sorted(bm.allocate(3)) == sorted(chain)
    assert bm.evictions_total == 3 and states(bm) == (3, 0, 0)
