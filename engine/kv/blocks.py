"""The block manager: which KV block belongs to whom, with reference counts and prefix reuse.

What it is: the bookkeeping over `num_blocks` fixed-size KV blocks (the arrays themselves
live in `engine/kv/pools.py`). Every sequence holds a *block table* (a list of block ids,
block `i` holding positions `i*block_size .. (i+1)*block_size - 1`), and every block
carries a reference count. A block is in exactly one state:

    used    ref > 0                     held by at least one running sequence
    cached  ref == 0, in the radix tree kept so a later prompt can reuse its K/V
    free    ref == 0, not in the tree   on the free list

With `prefix_cache="radix"`, a sequence's blocks enter the tree as soon as they are full
of computed tokens (`commit`), so a shared system prompt is computed once even while the
first request is still running. When the free list runs dry, `allocate` evicts cached
blocks, least recently used leaf first. With `prefix_cache="none"` nothing is ever
cached: a released block goes straight back to the free list.

Convention (ARCHITECTURE 3.3): `allocate` returns None when the blocks are not there;
the scheduler then preempts. It never raises for "not now". A mode outside
`PREFIX_CACHE_MODES` is refused by `check_prefix_cache` (the server's config uses the same
check's words, so the two never disagree).
"""
from __future__ import annotations

from engine.errors import InvalidConfig
from engine.kv.pools import blocks_for_tokens
from engine.kv.radix import RadixCache, RadixNode
from engine.kv.window import WindowPool
from engine.types import BASE_SCOPE, PREFIX_CACHE_MODES, CacheScope

# How a refused mode is described, to the engine's callers and the server's config alike.
PREFIX_CACHE_RULE = " or ".join(f'"{mode}"' for mode in PREFIX_CACHE_MODES)


def check_prefix_cache(mode: object) -> None:
    """`InvalidConfig` naming `prefix_cache` unless mode is one of PREFIX_CACHE_MODES."""
    if mode not in PREFIX_CACHE_MODES:
        raise InvalidConfig("prefix_cache", f"expected {PREFIX_CACHE_RULE}, got {mode!r}")


class BlockManager:
    """Reference-counted KV blocks, a free list and (optionally) a radix prefix cache."""

    def __init__(self, num_blocks: int, block_size: int, prefix_cache: str = "radix",
                 window: WindowPool | None = None):
        check_prefix_cache(prefix_cache)
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.radix = RadixCache(block_size) if prefix_cache == "radix" else None
        self.ref_counts = [0] * num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))  # a stack: block 0 is handed out first
        self.num_used_blocks = 0
        self.evictions_total = 0
        self.window = window               # the sliding layers' blocks (None: no such layer)

    # ----------------------------------------------------------------- state

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        """Unreferenced blocks kept in the tree for reuse."""
        return self.num_blocks - self.num_used_blocks - len(self._free)

    @property
    def num_available_blocks(self) -> int:
        """Blocks `allocate` can hand out now: free plus EVERY cached one.

        Only the cached leaves are evictable at once, but evicting a leaf makes its
        parent one, and no used block hangs below a cached one (a sequence holds its
        whole path from the root), so `allocate` can evict a chain to its root. Counting
        only today's leaves refused a prompt that the cache could make room for: with
        nothing running, the waiting queue then stalled forever.
        """
        return len(self._free) + self.num_cached_blocks

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return blocks_for_tokens(num_tokens, self.block_size)

    # ----------------------------------------------------------------- allocation

    def allocate(self, num_blocks: int) -> list[int] | None:
        """Hand out `num_blocks` fresh blocks (ref 1 each), evicting cached ones if needed."""
        if num_blocks > self.num_available_blocks:
            return None
        out = []
        for _ in range(num_blocks):
            if not self._free:
                evicted = self.radix.evict_one(self._is_unreferenced)
                if self.window is not None:
                    self.window.forget(evicted)
                self._free.append(evicted)
                self.evictions_total += 1
            block = self._free.pop()
            self.ref_counts[block] = 1
            out.append(block)
        self.num_used_blocks += num_blocks
        return out

    def grow(self, table: list[int], num_tokens: int) -> bool:
        """Extend a block table in place so it covers `num_tokens` positions; False if no room."""
        missing = self.blocks_for_tokens(num_tokens) - len(table)
        if missing <= 0:
            return True
        fresh = self.allocate(missing)
        if fresh is None:
            return False
        table.extend(fresh)
        return True

    def release(self, blocks) -> None:
        """Drop one reference from each block; unreferenced ones become cached or free."""
        for block in blocks:
            ref = self.ref_counts[block] - 1
            self.ref_counts[block] = ref
            if ref > 0:
                continue
            self.num_used_blocks -= 1
            if self.radix is not None and block in self.radix.node_of_block:
                self.radix.mark_unreferenced(block)
            else:
                self._free.append(block)

    def _is_unreferenced(self, block: int) -> bool:
        return self.ref_counts[block] == 0

    # ----------------------------------------------------------------- prefix cache

    def match_prefix(self, tokens, max_blocks: int,
                     scope: CacheScope = BASE_SCOPE) -> tuple[list[int], RadixNode | None]:
        """Take a reference on the longest prefix of `tokens` (at most `max_blocks`) cached
        in `scope` (engine.types.CacheScope: only equal scopes share blocks).

        Returns (block ids, the deepest node) -- the node is the scope's tree root when
        nothing matched (commits below it land in that scope), and None when the cache is off.
        With a window pool the match ends where the window blocks its next query reads are
        all still cached.
        """
        if self.radix is None:
            return [], None
        path = self.radix.match(tokens, max_blocks, scope)
        if self.window is not None:
            path = path[:self.window.usable_prefix([node.block for node in path])]
        for node in path:
            self._take_ref(node)
        return [node.block for node in path], (path[-1] if path else self.radix.root_of(scope))

    def match_partial(self, node: RadixNode | None, tokens) -> tuple[int, int]:
        """After `match_prefix`: a cached block below `node` whose first n ids are
        `tokens[:n]`, as (block id, n); its rows 0..n-1 hold exactly the K/V of those
        positions, since a block's K/V depend only on the ids up to them. (-1, 0) when
        there is none or the cache is off. No reference is taken: the caller copies the
        rows in the same step, before any forward can write that block again."""
        if node is None or self.radix is None:
            return -1, 0
        child, common = self.radix.partial_match(node, tokens[:self.block_size - 1])
        return (child.block, common) if child is not None else (-1, 0)

    def _take_ref(self, node: RadixNode) -> None:
        if self.ref_counts[node.block] == 0:
            self.num_used_blocks += 1
            self.radix.mark_referenced(node.block)
        else:
            node.last_used = self.radix.tick()
        self.ref_counts[node.block] += 1

    def commit(self, parent: RadixNode | None, key: tuple[int, ...], block: int) -> RadixNode | None:
        """Offer a full block of computed tokens to the tree below `parent`.

        Returns the node to continue from (None: the cache is off). When another sequence
        already committed the same prefix, the caller's block is released and the node's
        block referenced instead: the caller must put `node.block` in its table (the two
        hold the same K/V), so duplicates computed concurrently are not kept twice.
        """
        if self.radix is None or parent is None:
            return None
        node = self.radix.insert(parent, key, block)
        if node.block != block:
            self._take_ref(node)
            self.release([block])
        return node
