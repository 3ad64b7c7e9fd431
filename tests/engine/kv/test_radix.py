"""The radix tree of full KV blocks: longest-prefix match, conflicts, leaf-first LRU eviction."""
from engine.kv.radix import RadixCache

BS = 2


def build(cache, tokens, blocks):
    node = cache.root
    for i, block in enumerate(blocks):
        node = cache.insert(node, tuple(tokens[i * BS:(i + 1) * BS]), block)
    return node


def test_match_returns_longest_prefix_of_full_blocks_only():
    cache = RadixCache(BS)
    build(cache, [1, 2, 3, 4, 5, 6], [10, 11, 12])
    assert [n.block for n in cache.match([1, 2, 3, 4, 9, 9], 10)] == [10, 11]
    assert [n.block for n in cache.match([1, 2, 3], 10)] == [10]          # 3 is half a block
    assert [n.block for n in cache.match([1, 2, 3, 4, 5, 6], 2)] == [10, 11]  # capped
    assert cache.match([2, 1], 10) == []


def test_branches_share_their_common_parent():
    cache = RadixCache(BS)
    build(cache, [1, 2, 3, 4], [10, 11])
    a = cache.match([1, 2], 1)[0]
    cache.insert(a, (7, 8), 12)
    assert [n.block for n in cache.match([1, 2, 7, 8], 5)] == [10, 12]
    assert len(cache) == 3


def test_insert_of_an_existing_prefix_keeps_the_old_block():
    cache = RadixCache(BS)
    build(cache, [1, 2], [10])
    assert cache.insert(cache.root, (1, 2), 99).block == 10
    assert 99 not in cache.node_of_block
    assert cache.insert(cache.root, (1, 2), 10).block == 10
    assert [n.block for n in cache.match([1, 2], 5)] == [10]


def test_eviction_is_lru_among_unreferenced_leaves_and_parents_follow_children():
    cache = RadixCache(BS)
    build(cache, [1, 2, 3, 4], [10, 11])
    build(cache, [5, 6], [20])
    refs = {10: 0, 11: 0, 20: 0}
    for block in (20, 11, 10):                  # release order: 20 first (oldest)
        cache.mark_unreferenced(block)
    assert cache.num_evictable == 2             # 10 has a child, so it is not a leaf
    order = []
    while cache.num_evictable:
        order.append(cache.evict_one(lambda b: refs[b] == 0))
    assert order == [20, 11, 10]
    assert len(cache) == 0


def test_a_referenced_parent_does_not_become_evictable():
    cache = RadixCache(BS)
    build(cache, [1, 2, 3, 4], [10, 11])
    cache.mark_unreferenced(11)
    assert cache.evict_one(lambda b: False) == 11
    assert cache.num_evictable == 0


def test_partial_match_finds_the_child_block_sharing_the_most_leading_ids():
    cache = RadixCache(4)
    top = cache.insert(cache.root, (1, 2, 3, 4), 10)
    cache.insert(top, (5, 6, 7, 8), 11)
    cache.insert(top, (5, 6, 9, 9), 12)
    cache.insert(top, (7, 7, 7, 7), 13)
    child, common = cache.partial_match(top, (5, 6, 7, 0))
    assert (child.block, common) == (11, 3)
    assert cache.partial_match(top, (8, 6, 7)) == (None, 0)              # no child starts with 8
    assert cache.partial_match(top, ())[1] == 0


def test_partial_match_skips_a_node_with_too_many_children():
    from engine.kv.radix import MAX_PARTIAL_SCAN_CHILDREN
    cache = RadixCache(2)
    for i in range(MAX_PARTIAL_SCAN_CHILDREN + 1):
        cache.insert(cache.root, (i, 0), 100 + i)
    assert cache.partial_match(cache.root, (3, 9)) == (None, 0)
