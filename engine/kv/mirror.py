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

Bounded: the mirror never holds more bytes than `max_bytes` (the engine passes the
pool's own size); when a step would need more, the runner falls back to the gather.
"""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from engine.kv.pools import KVCache, block_bytes, blocks_for_tokens

# Token capacity grows in steps of this many positions (a reallocation copies the rows).
CAPACITY_STEP_TOKENS = 128


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


class DecodeMirror:
    def __init__(self, kv: KVCache, num_layers: int, max_bytes: int):
        self.kv = kv
        self.num_layers = num_layers
        self.max_bytes = max_bytes
        self.k: list[np.ndarray] = []            # per layer K [rows_cap, KV, cap_tokens, hd]
        self.v: list[np.ndarray] = []            # per layer V [rows_cap, KV, cap_tokens, hd]
        self.rows_cap = 0
        self.cap_tokens = 0
        self.row_of: dict[int, int] = {}         # sequence id -> row
        self.valid_tokens: dict[int, int] = {}   # row -> positions 0.. that hold this sequence's K/V

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
                self._refill(int(row), m.start_pos, m.block_table)
            self.valid_tokens[int(row)] = m.start_pos + num_queries
        return rows

    def clear(self) -> None:
        self.k, self.v = [], []
        self.rows_cap = self.cap_tokens = 0
        self.row_of.clear()
        self.valid_tokens.clear()

    @property
    def num_rows(self) -> int:
        return max(self.row_of.values()) + 1 if self.row_of else 0

    def _reserve(self, rows: int, tokens: int) -> bool:
        """Grow (geometrically, so arrivals do not copy the mirror each time) within budget."""
        if rows <= self.rows_cap and tokens <= self.cap_tokens:
            return True
        if not self.kv.k:
            return False
        kv_heads, hd = self.kv.k[0].shape[2:]
        row_bytes = block_bytes(self.kv.config, 1)                          # per row and position
        step = CAPACITY_STEP_TOKENS
        doubled = (_grow(rows, self.rows_cap), _round_up(_grow(tokens, self.cap_tokens), step))
        # Else the positions needed, and as many of the doubled rows as the budget holds
        # beside them (growing one row at a time would copy the whole mirror per arrival).
        tight_tokens = _round_up(max(tokens, self.cap_tokens), step)
        rows_that_fit = self.max_bytes // (tight_tokens * row_bytes)
        tight = (max(rows, self.rows_cap, min(doubled[0], rows_that_fit)), tight_tokens)
        fits = [shape for shape in (doubled, tight) if shape[0] * shape[1] * row_bytes <= self.max_bytes]
        if not fits:
            return False
        new_rows, new_tokens = fits[0]
        for i in range(self.num_layers):
            k = np.zeros((new_rows, kv_heads, new_tokens, hd), dtype=np.float32)
            v = np.zeros((new_rows, kv_heads, new_tokens, hd), dtype=np.float32)
            if i < len(self.k):
                k[:self.rows_cap, :, :self.cap_tokens] = self.k[i]
                v[:self.rows_cap, :, :self.cap_tokens] = self.v[i]
                self.k[i], self.v[i] = k, v
            else:
                self.k.append(k)
                self.v.append(v)
        self.rows_cap, self.cap_tokens = new_rows, new_tokens
        return True

    def _refill(self, row: int, num_tokens: int, table: tuple[int, ...]) -> None:
        """Copy positions 0..num_tokens-1 of a sequence from the paged pools into its row."""
        used = blocks_for_tokens(num_tokens, self.kv.block_size)
        blocks = np.asarray(table[:used], dtype=np.int64)                   # [used]
        for i in range(self.num_layers):
            k, v = self.kv.gather_blocks(i, blocks)                         # [used*bs, KV, hd] each
            k, v = k[:num_tokens], v[:num_tokens]                           # [T, KV, hd]
            self.k[i][row, :, :num_tokens] = k.transpose(1, 0, 2)           # [KV, T, hd]
            self.v[i][row, :, :num_tokens] = v.transpose(1, 0, 2)           # [KV, T, hd]

    # ----------------------------------------------------------------- per layer

    def write(self, layer: int, rows: np.ndarray, positions: np.ndarray,
              k: np.ndarray, v: np.ndarray) -> None:
        """rows [m], positions [m], k/v [m, KV, hd]: one new K/V row per (row, position)."""
        self.k[layer][rows, :, positions] = k
        self.v[layer][rows, :, positions] = v

    def views(self, layer: int, num_rows: int, num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Views of the first rows and positions: K and V, each [R, KV, L, hd]."""
        return self.k[layer][:num_rows, :, :num_tokens], self.v[layer][:num_rows, :, :num_tokens]
