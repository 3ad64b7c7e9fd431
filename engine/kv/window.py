"""The window pool: KV blocks of the sliding-window layers, held only while a window reads them.

Why: a sliding layer (Gemma 3) attends to the last `window_tokens` positions only, so once a
sequence's next query lies a window past a block, no sliding layer will read that block
again. With one block table for every layer, such blocks stayed held for the global layers'
sake, and a long chat's KV grew with its context in every layer. So the sliding layers keep
their K/V in a pool of their own (the window pool: `engine/kv/pools.py` sizes its layers'
arrays by it), and each sequence a *window table* beside its block table:

    block table   [g0, g1, g2, g3, g4, g5]     global layers: every position, as before
    window table  [-1, -1, w7, w2, w9, w4]     sliding layers: -1 = dropped, behind the window

Entry i of both covers positions i*bs .. (i+1)*bs - 1. `drop_behind` releases the entries
wholly before (next query - window + 1); `cover` allocates new entries as the sequence
grows. So a sequence holds at most about window/bs + 2 window blocks, whatever its length.

The prefix cache keeps a committed block's window block too (`commit`): the tree holds one
reference on it, keyed by the global block of its node. A window block only the tree holds is
*cached*: `allocate` evicts those, oldest first, when the free list runs dry, independently of
the tree's own leaf-first eviction (a global node without its window block is still a valid
prefix for the global layers). A match is usable as far as the window blocks its next
query's window reaches are still there (`usable_prefix`); when the tree evicts a node, its
window block goes with it (`forget`).

What it is not: the owner of the tree or of the global blocks (engine/kv/blocks.py is).
Models without sliding layers have no window pool at all: their path is unchanged.
"""
from __future__ import annotations

from collections import OrderedDict

from engine.kv.pools import (BYTES_PER_MIB, MAX_KV_BLOCKS, block_bytes, blocks_for_tokens,
                             num_blocks_for_budget, windowed_layers)
from engine.model.spec import ModelConfig
from engine.types import EngineConfig

NO_BLOCK = -1                      # a window-table entry that was dropped (or never needed)


def window_pool_blocks(window_tokens: int, block_size: int, max_num_seqs: int,
                       max_batched_tokens: int) -> int:
    """The most window blocks a full batch can hold at once: every sequence's window with
    the partial blocks at its two ends, plus the rows one step computes past them."""
    per_seq = blocks_for_tokens(window_tokens, block_size) + 2
    return max_num_seqs * per_seq + blocks_for_tokens(max_batched_tokens, block_size)


def pool_sizes(config: ModelConfig, engine: EngineConfig) -> tuple[int, int | None]:
    """(global blocks, window blocks or None) for a model and an engine config.

    No sliding layer: no window pool, and the blocks of today (`num_kv_blocks`, else the
    `kv_cache_mib` budget). Else the window pool holds what a full batch of windows needs
    (`window_pool_blocks`), never more than the global count; with a budget, the global
    blocks take the rest of it, so the bytes a window pool saves hold longer contexts."""
    bs = engine.block_size
    windowed = windowed_layers(config)
    same = engine.num_kv_blocks or num_blocks_for_budget(config, bs, engine.kv_cache_mib)
    window = config.options.sliding_window
    if window is None or not any(windowed):
        return same, None
    window_blocks = min(same, window_pool_blocks(window, bs, engine.max_num_seqs,
                                                 engine.max_batched_tokens))
    global_bytes = block_bytes(config, bs, config.num_layers - sum(windowed))
    if engine.num_kv_blocks or global_bytes == 0:
        return same, window_blocks
    rest = engine.kv_cache_mib * BYTES_PER_MIB - window_blocks * block_bytes(config, bs, sum(windowed))
    return max(same, min(MAX_KV_BLOCKS, rest // global_bytes)), window_blocks


class WindowPool:
    """Reference-counted window blocks, a free list, and the window blocks the tree keeps."""

    def __init__(self, num_blocks: int, block_size: int, window_tokens: int):
        if num_blocks < 1 or window_tokens < 1:
            raise ValueError("num_blocks and window_tokens must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.window_tokens = window_tokens
        self.ref_counts = [0] * num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))   # a stack: block 0 is handed out first
        self.of_tree: dict[int, int] = {}                   # tree node's global block -> window block
        self._tree_node: dict[int, int] = {}                # window block -> its node's global block
        self._cached: OrderedDict[int, None] = OrderedDict()   # held by the tree alone, oldest first
        self.num_held_peak = 0                              # most blocks referenced at once (tests read it)
        self.evictions_total = 0

    # ----------------------------------------------------------------- state

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    @property
    def num_held_blocks(self) -> int:
        """Blocks some sequence references (the tree's own references not counted)."""
        return self.num_blocks - len(self._free) - len(self._cached)

    @property
    def num_available_blocks(self) -> int:
        return len(self._free) + len(self._cached)

    def first_needed_block(self, next_pos: int) -> int:
        """The first table entry a query at `next_pos` or later can read."""
        return max(0, next_pos - self.window_tokens + 1) // self.block_size

    # ----------------------------------------------------------------- a sequence's table

    def allocate(self, num_blocks: int) -> list[int] | None:
        """`num_blocks` fresh blocks (ref 1), evicting tree-only ones; None if not there."""
        if num_blocks > self.num_available_blocks:
            return None
        out = []
        for _ in range(num_blocks):
            if not self._free:
                block, _ = self._cached.popitem(last=False)
                del self.of_tree[self._tree_node.pop(block)]
                self.ref_counts[block] = 0
                self._free.append(block)
                self.evictions_total += 1
            block = self._free.pop()
            self.ref_counts[block] = 1
            out.append(block)
        self.num_held_peak = max(self.num_held_peak, self.num_held_blocks)
        return out

    def cover(self, table: list[int], num_tokens: int) -> bool:
        """Extend `table` in place to positions 0..num_tokens-1; False if no room (unchanged)."""
        missing = blocks_for_tokens(num_tokens, self.block_size) - len(table)
        if missing <= 0:
            return True
        fresh = self.allocate(missing)
        if fresh is None:
            return False
        table.extend(fresh)
        return True

    def drop_behind(self, table: list[int], next_pos: int) -> None:
        """Release the entries no query at `next_pos` or later can read (set to NO_BLOCK)."""
        for i in range(min(self.first_needed_block(next_pos), len(table))):
            if table[i] != NO_BLOCK:
                self.release([table[i]])
                table[i] = NO_BLOCK

    def release(self, blocks) -> None:
        """Drop one reference from each block (NO_BLOCK entries skipped)."""
        for block in blocks:
            if block == NO_BLOCK:
                continue
            ref = self.ref_counts[block] - 1
            self.ref_counts[block] = ref
            if ref == 0:
                self._free.append(block)
            elif ref == 1 and block in self._tree_node:
                self._cached[block] = None

    def _take_ref(self, block: int) -> None:
        self._cached.pop(block, None)
        self.ref_counts[block] += 1
        self.num_held_peak = max(self.num_held_peak, self.num_held_blocks)

    # ----------------------------------------------------------------- the prefix cache

    def commit(self, node_block: int, window_block: int) -> int:
        """A sequence committed the block whose tree node holds `node_block`; returns the
        window block it must keep in its table: the tree's, when the tree has one for this
        node already (the sequence's own is released), else its own, which the tree then
        also holds."""
        if window_block == NO_BLOCK:
            return NO_BLOCK
        kept = self.of_tree.get(node_block)
        if kept is not None:
            if kept != window_block:
                self._take_ref(kept)
                self.release([window_block])
            return kept
        self.of_tree[node_block] = window_block
        self._tree_node[window_block] = node_block
        self.ref_counts[window_block] += 1
        return window_block

    def usable_prefix(self, node_blocks: list[int]) -> int:
        """How many leading blocks of a cached path a sequence may start after: the most k
        such that the window blocks a query at position k*bs reads are all in the tree."""
        for k in range(len(node_blocks), 0, -1):
            first = self.first_needed_block(k * self.block_size)
            if all(block in self.of_tree for block in node_blocks[first:k]):
                return k
        return 0

    def share(self, node_blocks: list[int]) -> list[int]:
        """The window table of a sequence starting after the cached `node_blocks`: a
        reference on each window block its next query reads, NO_BLOCK before those."""
        first = self.first_needed_block(len(node_blocks) * self.block_size)
        table = [NO_BLOCK] * first
        for block in node_blocks[first:]:
            kept = self.of_tree[block]
            self._take_ref(kept)
            table.append(kept)
        return table

    def forget(self, node_block: int) -> None:
        """The tree evicted the node holding `node_block`: drop its window block's reference."""
        kept = self.of_tree.pop(node_block, None)
        if kept is None:
            return
        del self._tree_node[kept]
        self._cached.pop(kept, None)
        self.ref_counts[kept] -= 1
        if self.ref_counts[kept] == 0:
            self._free.append(kept)
