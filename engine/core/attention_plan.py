"""Attention planning: which rows of a step attend over which K/V, decided once per step.

The runner computes one step as one activation matrix `x [N, d]` (every chunk's rows, in
chunk order). Attention, though, is per sequence, so the planner sorts the chunks into
groups that one batched matmul can serve, and builds everything that depends only on
positions (row indices, block indices, causal masks) once; every layer reuses it:

    GatherGroup   chunks with the same query count n; their blocks are gathered from the
                  pools each layer as [B, L, KV, hd]. Leading blocks that every member
                  shares (a cached system prompt) are split off and gathered once.
    MirrorGroup   the one-token (decode) rows, read as views of the decode mirror's dense
                  per-sequence rows (`engine/kv/mirror.py`): nothing is gathered.

Sliding-window layers (Gemma 3) see only the keys j with i - window < j <= i, and read
only those: a gathered group carries, beside the blocks and mask every global layer uses,
its `window` (`WindowKeys`): per member only the blocks from the first one its queries'
windows reach, with the windowed mask of those positions. A decode group carries each
row's end and window start (`MirrorGroup.ends`, `window_starts`), so the runner slices the
mirror's rows to the window instead of masking the whole context. Shared leading blocks
(a cached system prompt) are split off for the global layers; the sliding layers'
windows differ per member and leave a long shared prefix behind, so they read their
`window` -- unless no query of the group is past the window's length (the usual chat
below 512 tokens): then every layer reads the same keys, shared blocks included.

With a window pool (engine/kv/window.py) the sliding layers' blocks have ids of their own:
`window` is then built from the members' window tables, and below the window's length a
group carries `local`, the same group over the window tables (its shared leading blocks
split off on those tables: the shared-prefix shortcut per layer kind).

A group's score array [B, KV, G*n, L] stays below `llama.MAX_SCORE_ELEMENTS` (read at call
time, one source): a long single prefill is cut into query pieces that each fit, and
equal-length chunks share a group only while it fits.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Union

import numpy as np

from engine.kv.pools import blocks_for_tokens
from engine.model import llama

if TYPE_CHECKING:
    from engine.core.chunk import Chunk
    from engine.kv.mirror import DecodeMirror

F32 = np.float32
DECODE_QUERIES = 1               # a decode row attends with exactly one query


@dataclass(frozen=True, slots=True)
class Member:
    """One chunk (or one score-sized piece of a long chunk) inside a group."""
    first_row: int                   # its first row in the step's activations x [N, d]
    start_pos: int                   # the position of its first query
    block_table: tuple[int, ...]     # its sequence's blocks, covering every query's position
    seq_id: int                      # the decode mirror's key (-1: none)
    window_table: tuple[int, ...] | None = None   # the sliding layers' blocks (None: block_table)


@dataclass(frozen=True, slots=True)
class WindowKeys:
    """What a sliding layer reads for a gathered group: member b's blocks from the first
    one its queries' windows reach (positions first_pos[b] ..), and their mask."""
    block_index: np.ndarray          # [B, nw] block ids (padded with block 0, hidden)
    bias: np.ndarray                 # [B, 1, G*n or 1, Lw]: 0 inside the window, -inf outside
    first_pos: np.ndarray            # [B] the position of each member's first key
    query_offsets: np.ndarray        # [B] start_pos - first_pos: query i sees key index offset + i


@dataclass(frozen=True, slots=True)
class GatherGroup:
    """Members with the same query count n whose blocks are gathered from the pools."""
    rows: np.ndarray                 # [B*n] row indices into x, ordered (b, i)
    block_index: np.ndarray          # [B, nb] block ids after the shared ones (padded with block 0)
    bias: np.ndarray                 # [B, 1, G*n or 1, L]: 0 visible, -inf hidden
    batch: int                       # B
    num_queries: int                 # n
    shared_blocks: np.ndarray | None = None  # [S] leading blocks every member has (None: none)
    window: WindowKeys | None = None         # the sliding layers' keys (None: read the above)
    local: GatherGroup | None = None         # ... below the window, over the window tables


@dataclass(frozen=True, slots=True)
class MirrorGroup:
    """Decode rows attending over the decode mirror's rows 0..span_rows-1 (views, no gather)."""
    rows: np.ndarray                 # [B] row indices into x, in member order
    mirror_rows: np.ndarray          # [B] the members' decode-mirror rows, in member order
    bias: np.ndarray | None          # [R, 1, 1, L]: 0 visible, -inf hidden (None: all visible)
    span_rows: int                   # R: attention runs over mirror rows 0..R-1
    num_tokens: int                  # L: ... and their positions 0..L-1
    in_order: bool                   # mirror_rows == 0..B-1: attend without scatter or gathers
    local_bias: np.ndarray | None = None  # like bias for sliding layers (None: all visible)
    ends: np.ndarray | None = None        # [R] each row's keys are positions < ends[r] ...
    window_starts: np.ndarray | None = None  # [R] ... and, in sliding layers, >= window_starts[r]

    @property
    def batch(self) -> int:          # B
        return self.rows.shape[0]

    @property
    def num_queries(self) -> int:    # n
        return DECODE_QUERIES


AttentionGroup = Union[GatherGroup, MirrorGroup]


class AttentionPlanner:
    """Turns a step's chunks into attention groups, for one model shape and KV layout."""

    def __init__(self, num_heads: int, group_size: int, block_size: int,
                 mirror: DecodeMirror | None = None, window_tokens: int | None = None):
        self.num_heads = num_heads           # H query heads
        self.group_size = group_size         # G query heads per KV head
        self.block_size = block_size         # tokens per KV block
        self.mirror = mirror
        self.window_tokens = window_tokens   # the sliding layers' window (None: no such layer)

    def plan(self, chunks: list[Chunk]) -> list[AttentionGroup]:
        """Group chunks by query count; cut long single prefills into score-sized pieces.

        Multi-row chunks of one length share a group while its scores [B, KV, G*n, max end]
        fit MAX_SCORE_ELEMENTS; the next one that would not fit starts a new group.
        """
        limit, heads = llama.MAX_SCORE_ELEMENTS, self.num_heads
        by_length: dict[int, list[list[Member]]] = {}
        pieces: list[AttentionGroup] = []
        first_row = 0
        for c in chunks:
            n = len(c.tokens)
            max_queries = max(1, limit // (heads * (c.start_pos + n)))
            member = Member(first_row, c.start_pos, c.block_table, c.seq_id, c.window_table)
            if n <= max_queries:
                batches = by_length.setdefault(n, [[]])
                if n > 1 and not _fits(batches[-1] + [member], n, heads, limit):
                    batches.append([])
                batches[-1].append(member)
            else:
                for off in range(0, n, max_queries):
                    piece = Member(first_row + off, c.start_pos + off, c.block_table, c.seq_id,
                                   c.window_table)
                    pieces.append(self.gather_group(min(max_queries, n - off), [piece]))
            first_row += n
        decode = by_length.pop(DECODE_QUERIES, None)
        groups = [self.gather_group(n, members) for n, batches in by_length.items()
                  for members in batches] + pieces
        if decode is not None:
            groups.append(self.decode_group(decode[0]))
        return groups

    def decode_group(self, members: list[Member]) -> AttentionGroup:
        """The one-token rows: through the decode mirror when it can hold them, else gathered."""
        if self.mirror is None or min(m.seq_id for m in members) < 0:
            return self.gather_group(DECODE_QUERIES, members)
        mirror_rows = self.mirror.prepare(members, DECODE_QUERIES)
        if mirror_rows is None:
            return self.gather_group(DECODE_QUERIES, members)
        span = self.mirror.num_rows
        ends = np.zeros(span, dtype=np.int64)                                               # [R]
        ends[mirror_rows] = [m.start_pos + 1 for m in members]
        length = int(ends.max())
        ends[ends == 0] = length                                                            # idle rows: finite garbage
        hidden = np.arange(length)[None, :] >= ends[:, None]                                # [R, L]
        local_bias = window_starts = None
        if self.window_tokens is not None:                                                  # query at ends-1
            window_starts = np.maximum(ends - self.window_tokens, 0)                        # [R]
            outside = np.arange(length)[None, :] < window_starts[:, None]                  # [R, L]
            local_bias = _mirror_bias(hidden | outside)
        x_rows = np.asarray([m.first_row for m in members], dtype=np.int64)                 # [B]
        in_order = span == len(members) and bool(np.all(mirror_rows == np.arange(span)))
        return MirrorGroup(x_rows, mirror_rows, _mirror_bias(hidden),
                           span_rows=span, num_tokens=length, in_order=in_order,
                           local_bias=local_bias, ends=ends, window_starts=window_starts)

    def gather_group(self, n: int, members: list[Member]) -> GatherGroup:
        """A gathered group: members' blocks are copied out of the pools each layer.

        Leading blocks that every member's table holds (a shared system prompt from the
        prefix cache) and that every query sees are split off as `shared_blocks`: they
        are gathered once, not once per member. `block_index` and `bias` cover the rest.
        The sliding layers read `window` past the window's length, else `local` when their
        blocks are the window pool's, else the same keys.
        """
        group = self._gathered(n, members)
        if self.window_tokens is None:
            return group
        windowed = members
        if members[0].window_table is not None:
            windowed = [replace(m, block_table=m.window_table) for m in members]
        q_pos = np.asarray([m.start_pos for m in members])[:, None] + np.arange(n)          # [B, n]
        if int(q_pos.max()) >= self.window_tokens:
            return replace(group, window=self.window_keys(windowed, n, q_pos))
        if windowed is not members:        # below the window nothing was dropped yet
            return replace(group, local=self._gathered(n, windowed))
        return group

    def _gathered(self, n: int, members: list[Member]) -> GatherGroup:
        """The group over the members' block tables, shared leading blocks split off."""
        bs, groups = self.block_size, self.group_size
        batch = len(members)
        shared = self.num_shared_blocks(members)                                            # S_b
        ends = np.asarray([m.start_pos + n for m in members])                               # [B]
        num_blocks = blocks_for_tokens(int(ends.max()), bs) - shared
        block_index = np.zeros((batch, num_blocks), dtype=np.int64)                         # [B, nb]
        for b, m in enumerate(members):
            used = blocks_for_tokens(m.start_pos + n, bs)
            block_index[b, :used - shared] = m.block_table[shared:used]
        rows = np.concatenate([np.arange(m.first_row, m.first_row + n) for m in members])   # [B*n]
        q_pos = np.asarray([m.start_pos for m in members])[:, None] + np.arange(n)          # [B, n]
        k_pos = np.arange(shared * bs, (shared + num_blocks) * bs)                          # [L]
        hidden = k_pos[None, None, :] > q_pos[:, :, None]                                   # [B, n, L]
        shared_blocks = np.asarray(members[0].block_table[:shared], dtype=np.int64) if shared else None
        return GatherGroup(rows, block_index, _gather_bias(hidden, groups), batch, n,
                           shared_blocks=shared_blocks)

    def window_keys(self, members: list[Member], n: int, q_pos: np.ndarray) -> WindowKeys:
        """The blocks the sliding layers read: member b's from the block holding its first
        query's earliest key (start_pos - window + 1) to its last query's. q_pos [B, n]."""
        bs, window = self.block_size, self.window_tokens
        first_block = [max(0, m.start_pos - window + 1) // bs for m in members]             # [B]
        used = [blocks_for_tokens(m.start_pos + n, bs) for m in members]                    # [B]
        num_blocks = max(u - f for u, f in zip(used, first_block))                          # nw
        block_index = np.zeros((len(members), num_blocks), dtype=np.int64)                  # [B, nw]
        for b, m in enumerate(members):
            block_index[b, :used[b] - first_block[b]] = m.block_table[first_block[b]:used[b]]
        first_pos = np.asarray(first_block, dtype=np.int64) * bs                            # [B]
        k_pos = first_pos[:, None] + np.arange(num_blocks * bs)                             # [B, Lw]
        hidden = (k_pos[:, None, :] > q_pos[:, :, None]) \
            | (k_pos[:, None, :] <= q_pos[:, :, None] - window)                            # [B, n, Lw]
        offsets = np.asarray([m.start_pos for m in members], dtype=np.int64) - first_pos   # [B]
        return WindowKeys(block_index, _gather_bias(hidden, self.group_size), first_pos, offsets)

    def num_shared_blocks(self, members: list[Member]) -> int:
        """Leading blocks identical in every member's table and wholly before every query
        (the global layers' part: sliding layers read their own `window_keys`)."""
        if len(members) < 2:
            return 0
        limit = min(m.start_pos for m in members) // self.block_size
        first = members[0].block_table
        count = 0
        while count < limit and all(m.block_table[count] == first[count] for m in members):
            count += 1
        return count


def _gather_bias(hidden: np.ndarray, groups: int) -> np.ndarray:
    """hidden [B, n, L] -> the additive mask, 0 visible, -inf hidden: [B, 1, 1, L] for one
    query, else [B, 1, G*n, L] (the G query heads of a KV head, each over the n queries)."""
    batch, n, length = hidden.shape
    bias = np.where(hidden, F32(-np.inf), F32(0.0)).astype(F32)                             # [B, n, L]
    if n == 1:
        return np.ascontiguousarray(bias[:, None])                                          # [B, 1, 1, L]
    bias = np.broadcast_to(bias[:, None], (batch, groups, n, length))
    return np.ascontiguousarray(bias.reshape(batch, 1, groups * n, length))                 # [B, 1, G*n, L]


def _mirror_bias(hidden: np.ndarray) -> np.ndarray | None:
    """hidden [R, L] -> the additive mask [R, 1, 1, L] (None when nothing is hidden)."""
    if not hidden.any():
        return None
    return np.where(hidden, F32(-np.inf), F32(0.0)).astype(F32)[:, None, None, :]          # [R, 1, 1, L]


def _fits(members: list[Member], n: int, heads: int, limit: int) -> bool:
    """Whether members' n-query group keeps its scores [B, H*n, max end] within limit elements.

    A lone member always fits (it passed the per-chunk cut already).
    """
    longest = max(m.start_pos + n for m in members)
    return len(members) == 1 or len(members) * heads * n * longest <= limit
