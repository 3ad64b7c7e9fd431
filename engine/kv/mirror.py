"""The decode mirror: dense per-sequence copies of the K/V of sequences that are decoding.

Why: paged attention must gather a sequence's blocks into one array before numpy can
matmul over them, and a decode step does that for every layer, every step, for every
running sequence -- at 64 streams of ~190 tokens that copy moves as many bytes as the
weights themselves. Yet from one decode step to the next a sequence gains exactly one
K/V row per layer. So the runner keeps, per layer, dense arrays in which each decoding
sequence owns a row; a step appends the new K/V to the row (as well as to the paged
pools, which stay the source of truth), and attention reads the first rows and positions
as *views*: no gather at all. K and V share one head-major layout:

    K, V  [rows, KV, capacity_tokens, hd]   a head's first L positions are one [L, hd] run

so a row's K for one head is a contiguous run of memory; `q @ K^T` reads it as a
transposed gemm operand, `probs @ V` as a plain one. (Measured over 30 layers at 64 rows,
this beat a K^T `[rows, KV, hd, capacity]` layout by a quarter: each of K^T's hd rows is
a separate short run, which streams from memory worse. What OpenBLAS does run slowly is a
transposed view of the *pools'* token-major `[slots, KV, hd]` layout, whose rows for one
head lie KV*hd floats apart.)

Rows are assigned to sequences by id, lowest free row first, and dropped as soon as a
sequence is not in a step's decode group (finished, preempted, prefilling again). A row
whose copy is behind (new, or its sequence verified drafts through the paged path) is
refilled once from the pools. Rows not in the current group are computed and ignored.
The window pool's layers (engine/kv/window.py) refill from the sequence's window table,
only the blocks it still holds: their positions before the window are never read.

Bounded: the mirror never holds more bytes than `max_bytes` (the engine passes the
pool's own size); when a step would need more, the runner falls back to the gather.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from engine.kv.pools import KVCache, block_bytes, blocks_for_tokens

# Token capacity grows in steps of this many positions (a reallocation copies the rows).
CAPACITY_STEP_TOKENS = 128
# Past this fraction of the rows or positions held, the next capacity is built ahead of
# need, one layer per step (a whole-mirror copy in one step was a ~1 s stall).
GROW_AHEAD_FRACTION = 0.75


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _grow(need: int, capacity: int) -> int:
    """The capacity to allocate for `need`: unchanged if it fits, else at least doubled."""
    return capacity if need <= capacity else max(need, 2 * capacity)


class MirrorMember(Protocol):
    """What the mirror needs of a decoding sequence (the planner's `Member` has these)."""
    seq_id: int                      # the row's key
    start_pos: int                   # positions 0..start_pos-1 must already be in the row
    block_table: tuple[int, ...]     # where to refill them from when the row is behind
    window_table: tuple[int, ...] | None   # ... in the window pool's layers (None: block_table)


class DecodeMirror:
    def __init__(self, kv: KVCache, num_layers: int, max_bytes: int):
        self.kv = kv
        self.num_layers = num_layers
        self.max_bytes = max_bytes
        # Per layer K and V [rows_cap_i, KV, cap_tokens_i, hd]: layers may differ for a few
        # steps while a larger capacity is being built ahead of need (`_grow_ahead`).
        self.k: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.row_of: dict[int, int] = {}         # sequence id -> row
        self.valid_tokens: dict[int, int] = {}   # row -> positions 0.. that hold this sequence's K/V
        self._ahead: tuple[int, int] | None = None   # (rows, tokens) being built a layer per step
        self.layers_grown_total = 0              # layer reallocations (tests read it)

    # ----------------------------------------------------------------- planning

    def prepare(self, members: Sequence[MirrorMember], num_queries: int) -> np.ndarray | None:
        """Rows for members attending `num_queries` new rows from their start positions.

        Returns rows [B] (in member order), or None when the mirror would exceed its
        budget (the caller gathers instead; the mirror is emptied).
        """
        wanted = {m.seq_id for m in members}
        for seq_id in [s for s in self.row_of if s not in wanted]:
            self.valid_tokens.pop(self.row_of.pop(seq_id))
        free = sorted(set(range(len(members) + len(self.row_of))) - set(self.row_of.values()))
        for m in members:
            if m.seq_id not in self.row_of:
                self.row_of[m.seq_id] = free.pop(0)
                self.valid_tokens[self.row_of[m.seq_id]] = 0
        need_rows = max(self.row_of.values()) + 1
        need_tokens = max(m.start_pos for m in members) + num_queries
        if not self._reserve(need_rows, need_tokens):
            self.clear()
            return None
        rows = np.asarray([self.row_of[m.seq_id] for m in members], dtype=np.int64)
        for m, row in zip(members, rows):
            if self.valid_tokens[int(row)] < m.start_pos:
                self._refill(int(row), m.start_pos, m.block_table, m.window_table)
            self.valid_tokens[int(row)] = m.start_pos + num_queries
        self._grow_ahead(need_rows, need_tokens)
        return rows

    def clear(self) -> None:
        self.k, self.v = [], []
        self._ahead = None
        self.row_of.clear()
        self.valid_tokens.clear()

    @property
    def num_rows(self) -> int:
        return max(self.row_of.values()) + 1 if self.row_of else 0

    @property
    def rows_cap(self) -> int:
        """Rows every layer holds."""
        return min(k.shape[0] for k in self.k) if self.k else 0

    @property
    def cap_tokens(self) -> int:
        """Positions every layer holds."""
        return min(k.shape[2] for k in self.k) if self.k else 0

    # ----------------------------------------------------------------- growing
    #
    # Growing copies a layer's K and V into larger arrays. All 30 layers of smol-135m at
    # 16 rows x 1,024 positions are 720 MiB: copied in one step, that step took ~1 s (the
    # worst gap bench/shared_cpu.py saw). So a capacity is built AHEAD of need, one layer per
    # step, once the rows or positions in use pass GROW_AHEAD_FRACTION of it; only a need
    # that outruns that (a burst of arrivals, a long prompt joining) grows every layer at once.

    def _reserve(self, rows: int, tokens: int) -> bool:
        """Every layer holds `rows` x `tokens`, grown now if needed; False over budget."""
        if rows <= self.rows_cap and tokens <= self.cap_tokens:
            return True
        ahead = self._ahead
        if ahead is not None and rows <= ahead[0] and tokens <= ahead[1]:
            shape = ahead                  # finish the capacity being built ahead
        elif ahead is not None:            # a shape that holds the half-built one too
            shape = self._shape_for(max(rows, ahead[0]), max(tokens, ahead[1]))
        else:
            shape = self._shape_for(rows, tokens)
        if shape is None:
            return False
        for layer in range(self.num_layers):
            self._grow_layer(layer, shape)
        self._ahead = None
        return True

    def _grow_ahead(self, rows: int, tokens: int) -> None:
        """Build the next capacity one layer per call once use passes the threshold."""
        if self._ahead is None:
            rows_cap, cap_tokens = self.rows_cap, self.cap_tokens
            rows_full = rows > rows_cap * GROW_AHEAD_FRACTION
            tokens_full = tokens > cap_tokens * GROW_AHEAD_FRACTION
            if not (rows_full or tokens_full):
                return
            shape = self._shape_for(rows_cap + 1 if rows_full else rows,
                                    cap_tokens + 1 if tokens_full else tokens)
            if shape is None or shape == (rows_cap, cap_tokens):
                return                     # the budget holds no more: grow on need (or gather)
            self._ahead = shape
        for layer in range(self.num_layers):
            if self._grow_layer(layer, self._ahead):
                return
        self._ahead = None                 # every layer holds it now

    def _shape_for(self, rows: int, tokens: int) -> tuple[int, int] | None:
        """(rows, positions) to allocate for a need: doubled (so arrivals do not copy the
        mirror each time) if the budget holds it, else the positions needed with as many
        rows as fit; None if not even the need fits."""
        rows_cap, cap_tokens = self.rows_cap, self.cap_tokens
        row_bytes = block_bytes(self.kv.config, 1)                          # per row and position
        step = CAPACITY_STEP_TOKENS
        doubled = (_grow(rows, rows_cap), _round_up(_grow(tokens, cap_tokens), step))
        tight_tokens = _round_up(max(tokens, cap_tokens), step)
        rows_that_fit = self.max_bytes // (tight_tokens * row_bytes)
        tight = (max(rows, rows_cap, min(doubled[0], rows_that_fit)), tight_tokens)
        fits = [shape for shape in (doubled, tight) if shape[0] * shape[1] * row_bytes <= self.max_bytes]
        return fits[0] if fits else None

    def _grow_layer(self, layer: int, shape: tuple[int, int]) -> bool:
        """Reallocate one layer to at least `shape`, keeping its rows; False if it held it."""
        if not self.kv.k:
            return False
        kv_heads, hd = self.kv.k[0].shape[2:]
        if layer < len(self.k):
            old_rows, _, old_tokens, _ = self.k[layer].shape
            if old_rows >= shape[0] and old_tokens >= shape[1]:
                return False
            new_shape = (max(old_rows, shape[0]), kv_heads, max(old_tokens, shape[1]), hd)
        else:
            old_rows = old_tokens = 0
            new_shape = (shape[0], kv_heads, shape[1], hd)
        k = np.zeros(new_shape, dtype=np.float32)
        v = np.zeros(new_shape, dtype=np.float32)
        if layer < len(self.k):
            k[:old_rows, :, :old_tokens] = self.k[layer]
            v[:old_rows, :, :old_tokens] = self.v[layer]
            self.k[layer], self.v[layer] = k, v
        else:
            self.k.append(k)
            self.v.append(v)
        self.layers_grown_total += 1
        return True

    def _refill(self, row: int, num_tokens: int, table: tuple[int, ...],
                window_table: tuple[int, ...] | None) -> None:
        """Copy positions 0..num_tokens-1 of a sequence from the paged pools into its row
        (in the window pool's layers, from the first block its window table still holds)."""
        bs = self.kv.block_size
        used = blocks_for_tokens(num_tokens, bs)
        blocks = np.asarray(table[:used], dtype=np.int64)                   # [used]
        window_part = None                 # (first position, blocks) the window table still holds
        if window_table is not None:
            kept = np.asarray(window_table[:used], dtype=np.int64)          # [used], -1: dropped
            first = int(np.argmax(kept >= 0)) if (kept >= 0).any() else used
            window_part = (first * bs, kept[first:])
        for i in range(self.num_layers):
            start, layer_blocks = 0, blocks
            if window_part is not None and self.kv.in_window_pool[i]:
                start, layer_blocks = window_part
            if start >= num_tokens:
                continue
            k, v = self.kv.gather_blocks(i, layer_blocks)                   # [blocks*bs, KV, hd] each
            k, v = k[:num_tokens - start], v[:num_tokens - start]           # [T, KV, hd]
            self.k[i][row, :, start:num_tokens] = k.transpose(1, 0, 2)      # [KV, T, hd]
            self.v[i][row, :, start:num_tokens] = v.transpose(1, 0, 2)      # [KV, T, hd]

    # ----------------------------------------------------------------- per layer

    def write(self, layer: int, rows: np.ndarray, positions: np.ndarray,
              k: np.ndarray, v: np.ndarray) -> None:
        """rows [m], positions [m], k/v [m, KV, hd]: one new K/V row per (row, position)."""
        self.k[layer][rows, :, positions] = k
        self.v[layer][rows, :, positions] = v

    def views(self, layer: int, num_rows: int, num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Views of the first rows and positions: K and V, each [R, KV, L, hd]."""
        return self.k[layer][:num_rows, :, :num_tokens], self.v[layer][:num_rows, :, :num_tokens]
