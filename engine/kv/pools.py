"""The paged K/V pools: preallocated float32 arrays of fixed-size blocks.

What it is: for every layer one array per K and V of shape
`[num_blocks, block_size, KV, hd]`. A token at position `p` of a sequence with block table
`table` lives in block `table[p // block_size]`, row `p % block_size`; flattening the
first two axes gives its *slot* `table[p // bs] * bs + p % bs` in a `[num_blocks * bs, KV,
hd]` view, which is how a step writes all its new K/V rows with one fancy assignment.

Reading keeps whole blocks together: a batch of block tables `[B, max_blocks]` gathers
`[B, max_blocks, bs, KV, hd]`, i.e. `[B, max_blocks * bs, KV, hd]`, with one indexing
operation per layer; positions past a sequence's length are masked in attention.

With a window pool (`num_window_blocks`, engine/kv/window.py) the sliding-window layers'
arrays hold that many blocks instead, addressed by each sequence's window table: a step
writes their rows at the window table's slots, and every reader of those layers uses it.
Without one (no sliding layers, or a runner driven directly) every layer shares one table.

What it is not: the owner of the block tables (the block manager and sequences are).
The pool size comes from a memory budget (`kv_cache_mib`) unless `num_kv_blocks` is set.
"""
from __future__ import annotations

import numpy as np

from engine.model.spec import ModelConfig

BYTES_PER_MIB = 1024 * 1024
FLOAT32_BYTES = 4
# A zero-layer (or tiny) model's budget would allow a huge block count; the block manager
# still tracks every block, so cap the count at this many (131072 tokens at block size 16).
MAX_KV_BLOCKS = 1 << 13


def block_bytes(config: ModelConfig, block_size: int, num_layers: int | None = None) -> int:
    """Bytes one block takes across all layers (or `num_layers` of them), K and V."""
    layers = config.num_layers if num_layers is None else num_layers
    return layers * 2 * block_size * config.num_kv_heads * config.head_dim * FLOAT32_BYTES


def windowed_layers(config: ModelConfig) -> list[bool]:
    """Per layer: does it slide (attend within a window)?"""
    return [config.options.layer_window(i) is not None for i in range(config.num_layers)]


def num_blocks_for_budget(config: ModelConfig, block_size: int, kv_cache_mib: int) -> int:
    """How many blocks fit in `kv_cache_mib` MiB (at least one, at most MAX_KV_BLOCKS)."""
    per_block = block_bytes(config, block_size)
    if per_block == 0:
        return MAX_KV_BLOCKS
    return max(1, min(MAX_KV_BLOCKS, kv_cache_mib * BYTES_PER_MIB // per_block))


class KVCache:
    """Per-layer K and V pools `[num_blocks, block_size, KV, hd]` (float32, zero-filled).

    The pools are written once at start-up (`np.full`, not the lazy `np.zeros`), so the
    memory is committed up front and no request pays the page faults of first use.
    """

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int,
                 num_window_blocks: int | None = None):
        self.config = config
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_window_blocks = num_window_blocks
        # Per layer: are its blocks the window pool's (addressed by window tables)?
        self.in_window_pool = windowed_layers(config) if num_window_blocks is not None \
            else [False] * config.num_layers
        self.k, self.v = [], []
        for windowed in self.in_window_pool:
            count = num_window_blocks if windowed else num_blocks
            shape = (count, block_size, config.num_kv_heads, config.head_dim)
            self.k.append(np.full(shape, 0.0, dtype=np.float32))
            self.v.append(np.full(shape, 0.0, dtype=np.float32))
        flat = (-1, config.num_kv_heads, config.head_dim)
        self.k_slots = [k.reshape(flat) for k in self.k]   # views: [blocks*bs, KV, hd]
        self.v_slots = [v.reshape(flat) for v in self.v]

    @property
    def nbytes(self) -> int:
        """Bytes the pools hold: every block, every layer, K and V."""
        return sum(k.nbytes + v.nbytes for k, v in zip(self.k, self.v))

    def write(self, layer: int, slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store new rows: slots [n], k/v [n, KV, hd]."""
        self.k_slots[layer][slots] = k
        self.v_slots[layer][slots] = v

    def copy_rows(self, src_block: int, dst_block: int, num_rows: int,
                  window_src: int = -1, window_dst: int = -1) -> None:
        """Rows 0..num_rows-1 of one block into another, in every layer's K and V (the
        window pool's layers: of `window_src` into `window_dst`)."""
        for layer, windowed in enumerate(self.in_window_pool):
            src, dst = (window_src, window_dst) if windowed else (src_block, dst_block)
            for pool in (self.k[layer], self.v[layer]):
                pool[dst, :num_rows] = pool[src, :num_rows]

    def gather(self, layer: int, block_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """block_index [B, nb] -> (K, V) each [B, nb*bs, KV, hd] (copies)."""
        b, nb = block_index.shape
        k = self.k[layer][block_index]                     # [B, nb, bs, KV, hd]
        v = self.v[layer][block_index]
        tail = k.shape[3:]
        return k.reshape(b, nb * self.block_size, *tail), v.reshape(b, nb * self.block_size, *tail)

    def gather_blocks(self, layer: int, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """blocks [S_b] -> (K, V) each [S_b*bs, KV, hd]: one run of positions (copies)."""
        k = self.k[layer][blocks]                          # [S_b, bs, KV, hd]
        v = self.v[layer][blocks]
        tail = k.shape[2:]
        return k.reshape(-1, *tail), v.reshape(-1, *tail)


def blocks_for_tokens(num_tokens: int, block_size: int) -> int:
    """How many blocks hold positions 0..num_tokens-1: the one ceiling division of the layout."""
    return -(-num_tokens // block_size)


def slots_for(table, start: int, num_tokens: int, block_size: int) -> np.ndarray:
    """Slot numbers of positions start .. start+num_tokens-1 of a sequence. -> [num_tokens]."""
    positions = np.arange(start, start + num_tokens)
    blocks = np.asarray(table, dtype=np.int64)[positions // block_size]
    return blocks * block_size + positions % block_size
