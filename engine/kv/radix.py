"""The radix tree of cached KV blocks: token ids -> the block that holds their K/V.

What it is: a trie whose edges are *full blocks* of token ids (a tuple of `block_size`
ids). A node stands for "the prefix made of every block on the path from the root", and
owns the KV block computed for its own edge. Because a block's K/V depend on every token
before it, the key of a block is its whole path, which is exactly what a trie gives.

    root --(t0..t15)--> A --(t16..t31)--> B        A: block 7, B: block 12
                         \\--(u16..u31)--> C        C: block 3  (same first block, other turn)

One tree per cache scope (`engine.types.CacheScope`: the request's LoRA adapter and its
tenant salt), so blocks of two scopes never meet on one path, whatever their tokens. A
scope's root is kept from its first block on and dropped when its last one is evicted (a
salt that never fills a block leaves nothing behind). The base, unsalted scope's root is
`root`.

What it is not: the owner of reference counts or the free list. `BlockManager` decides
when a node's block is unreferenced; this module only keeps the tree, the last-use
clock of each node, and the set of *evictable* nodes (unreferenced leaves). Eviction is
leaf-first in least-recently-used order, so a prefix never loses its parent while a
longer cached prefix still hangs below it.
"""
from __future__ import annotations

from typing import Hashable

from engine.types import BASE_SCOPE

# A node with more children than this is not scanned for a partial block (the scan is a
# Python loop over its children's keys): a root under thousands of unrelated first blocks.
MAX_PARTIAL_SCAN_CHILDREN = 256


class RadixNode:
    """One full block of a cached prefix."""
    __slots__ = ("key", "block", "parent", "children", "last_used", "scope")

    def __init__(self, key: tuple[int, ...], block: int, parent: RadixNode | None,
                 scope: Hashable = BASE_SCOPE):
        self.key = key                                  # the block's token ids
        self.block = block                              # KV block id (-1 for a root)
        self.parent = parent                            # None: a scope's root
        self.scope = scope                              # read on roots only
        self.children: dict[tuple[int, ...], RadixNode] = {}
        self.last_used = 0                              # logical clock of the last match / release


class RadixCache:
    """Prefix trie of full KV blocks with an LRU set of evictable leaves."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.root = RadixNode((), -1, None)                # the base, unsalted scope's
        self._roots: dict[Hashable, RadixNode] = {BASE_SCOPE: self.root}   # scope -> its tree
        self.node_of_block: dict[int, RadixNode] = {}
        self._evictable: dict[int, RadixNode] = {}       # block id -> unreferenced leaf
        self._clock = 0

    # ----------------------------------------------------------------- lookups

    def root_of(self, scope: Hashable) -> RadixNode:
        """The root of `scope`'s tree; a scope with none gets a fresh root, kept once a
        block is inserted below it (`insert`)."""
        root = self._roots.get(scope)
        return root if root is not None else RadixNode((), -1, None, scope)

    def roots(self) -> list[RadixNode]:
        return list(self._roots.values())

    def match(self, tokens, max_blocks: int, scope: Hashable = BASE_SCOPE) -> list[RadixNode]:
        """The nodes of the longest prefix of `tokens` cached in `scope`'s tree, at most
        `max_blocks` blocks."""
        bs = self.block_size
        path: list[RadixNode] = []
        node = self._roots.get(scope)
        if node is None:
            return path
        for i in range(max_blocks):
            child = node.children.get(tuple(tokens[i * bs:(i + 1) * bs]))
            if child is None:
                break
            path.append(child)
            node = child
        return path

    def partial_match(self, node: RadixNode, tokens) -> tuple[RadixNode | None, int]:
        """The child of `node` whose block starts with the most leading ids of `tokens`
        (fewer than a block: a prompt that leaves the cached path inside a block), and how
        many: (None, 0) when none starts with `tokens[0]` or `node` has too many children."""
        if len(node.children) > MAX_PARTIAL_SCAN_CHILDREN:
            return None, 0
        best, best_len = None, 0
        for key, child in node.children.items():
            common = 0
            for mine, theirs in zip(tokens, key):
                if mine != theirs:
                    break
                common += 1
            if common > best_len:
                best, best_len = child, common
        return best, best_len

    def __len__(self) -> int:
        return len(self.node_of_block)

    # ----------------------------------------------------------------- changes

    def insert(self, parent: RadixNode, key: tuple[int, ...], block: int) -> RadixNode | None:
        """Hang `block` (holding `key`'s K/V after `parent`'s prefix) below `parent`.

        Returns the new node, or the existing one when a block already holds this prefix
        (computed concurrently by another sequence; its block id differs from `block`).
        """
        if parent.parent is None:                        # a root: its scope's tree from now on
            parent = self._roots.setdefault(parent.scope, parent)
        existing = parent.children.get(key)
        if existing is not None:
            return existing
        node = RadixNode(key, block, parent)
        node.last_used = self.tick()
        parent.children[key] = node
        self.node_of_block[block] = node
        self._evictable.pop(parent.block, None)          # parent is no longer a leaf
        return node

    def tick(self) -> int:
        self._clock += 1
        return self._clock

    def mark_unreferenced(self, block: int) -> None:
        """`block` (in the tree) lost its last reference: keep it, evictable if a leaf."""
        node = self.node_of_block[block]
        node.last_used = self.tick()
        if not node.children:
            self._evictable[block] = node

    def mark_referenced(self, block: int) -> None:
        """`block` (in the tree) gained a reference: it may not be evicted now."""
        node = self.node_of_block[block]
        node.last_used = self.tick()
        self._evictable.pop(block, None)

    @property
    def num_evictable(self) -> int:
        return len(self._evictable)

    def evict_one(self, is_unreferenced) -> int:
        """Remove the least recently used unreferenced leaf; return its block id.

        `is_unreferenced(block)` tells whether the parent, once a leaf, may join the
        evictable set. The caller must check `num_evictable > 0` first.
        """
        block, node = min(self._evictable.items(), key=lambda item: item[1].last_used)
        del self._evictable[block]
        del self.node_of_block[block]
        parent = node.parent
        del parent.children[node.key]
        if parent.parent is None:                        # a scope's root
            if not parent.children and parent is not self.root:
                self._drop_root(parent)
        elif not parent.children and is_unreferenced(parent.block):
            self._evictable[parent.block] = parent
        return block

    def _drop_root(self, root: RadixNode) -> None:
        """Forget an empty scope's tree (its adapter need not stay alive for it)."""
        del self._roots[root.scope]
