"""The model runner: ONE batched forward per engine step over a paged KV cache.

What it is: a step is a list of `Chunk`s, one per scheduled sequence: a decode row (one
token), a prefill piece (up to `prefill_chunk` prompt tokens) or a speculative
verification (the last token plus its drafts). The runner concatenates every chunk's
tokens into one activation matrix `x [N, d]`, so each weight matrix is used by exactly one
matmul per layer per step (that is what turns a memory-bound batch-1 decode into sgemm):

    x = embed(ids)                                         [N, d]
    per layer:  q, k, v = qkv_project(rms_norm(x))         one matmul with the fused wqkv
                write k, v into the pools at the rows' slots
                attention per group of chunks over their blocks (paged, causal by position)
                x += attn @ wo ; x += mlp(rms_norm(x))     one matmul per weight
    logits only for the rows that sample                   [R, V], R << N for prefill

Attention groups chunks of equal length, gathers their blocks as `[B, L, KV, hd]` and
runs batched matmuls over `[B, KV, G*n, ...]`; a key is visible to a query iff its
position is <= the query's. Leading blocks that all of a group's members share (a
system prompt from the prefix cache) are gathered once and met by one gemm per KV head
over all members' queries, instead of B copies and B small gemms. The one-token
(decode) rows instead read the decode mirror (`engine/kv/mirror.py`), dense
per-sequence copies kept up to date row by row, so a decode step gathers nothing.
The dense maths (norms, RoPE, the projections, the MLP, the LM head) is
`engine/model/llama.py`'s, reused as is, so the runner differs from the dense reference only
in where K/V live.

What it is not: scheduling or sampling. Chunks in, logits out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.model import llama
from engine.kv.mirror import DecodeMirror
from engine.kv.pools import KVCache, slots_for
from engine.model.spec import LlamaWeights, ModelConfig

F32 = np.float32
# A group's score array [B, KV, G*n, L] stays below engine/model/llama.py's MAX_SCORE_ELEMENTS
# (read as llama.MAX_SCORE_ELEMENTS, one source): a long single-sequence prefill is cut into
# query pieces that each fit, and equal-length chunks share a group only while it fits.


@dataclass(frozen=True, slots=True)
class Chunk:
    """Tokens of one sequence computed in this step, at positions start_pos .. start_pos+n-1."""
    tokens: tuple[int, ...]
    start_pos: int
    block_table: tuple[int, ...]     # covers every position up to start_pos + n - 1
    num_logits: int                  # the last num_logits rows need logits (0: mid-prefill)
    seq_id: int = -1                 # identifies the sequence to the decode mirror (-1: none)


@dataclass(frozen=True, slots=True)
class _Group:
    """Chunks with the same query count n, attended together."""
    rows: np.ndarray                 # [B*n] row indices into x, ordered (b, i)
    block_index: np.ndarray          # [B, nb] block ids after the shared ones (padded with block 0)
    bias: np.ndarray | None          # [B, 1, G*n or 1, L]: 0 visible, -inf hidden (None: all visible)
    batch: int                       # B
    num_queries: int                 # n
    mirror_rows: np.ndarray | None = None   # [B] decode-mirror rows (None: gather the blocks)
    mirror_span: int = 0             # attention runs over mirror rows 0..mirror_span-1
    mirror_tokens: int = 0           # ... and their positions 0..mirror_tokens-1
    mirror_in_order: bool = False    # mirror_rows == 0..B-1: attend without scatter or gathers
    shared_blocks: np.ndarray | None = None  # [S] leading blocks every member has (None: none)


class ModelRunner:
    """Batched paged forward for one model and its KV pools."""

    def __init__(self, config: ModelConfig, weights: LlamaWeights, kv: KVCache, max_model_len: int,
                 *, mirror_bytes: int = 0):
        self.config = config
        self.mirror = DecodeMirror(kv, config.num_layers, mirror_bytes) if mirror_bytes > 0 else None
        self.weights = weights
        self.kv = kv
        self.block_size = kv.block_size
        self.group_size = config.num_heads // config.num_kv_heads      # G query heads per KV head
        self.scale = F32(1.0 / np.sqrt(config.head_dim))
        # RoPE angles for every position once: [max_model_len, hd/2] each.
        self.cos_table, self.sin_table = llama.rope_cos_sin(
            np.arange(max_model_len), config.head_dim, config.rope_theta)

    # ----------------------------------------------------------------- the step

    def forward(self, chunks: list[Chunk]) -> np.ndarray:
        """Run one step; return logits [sum(num_logits), V] in chunk order."""
        cfg, w = self.config, self.weights
        ids = np.fromiter((t for c in chunks for t in c.tokens), dtype=np.int64)           # [N]
        positions = np.concatenate([np.arange(c.start_pos, c.start_pos + len(c.tokens)) for c in chunks])
        x = llama.embed(w, ids)                                                             # [N, d]
        if w.layers:
            x = self._layers(x, chunks, positions)
        logit_rows = self._logit_rows(chunks)                                               # [R]
        h = llama.rms_norm(x[logit_rows], w.final_norm, cfg.rms_norm_eps)                   # [R, d]
        return llama.logits_from_hidden(w, h)                                               # [R, V]

    def _layers(self, x: np.ndarray, chunks: list[Chunk], positions: np.ndarray) -> np.ndarray:
        cfg = self.config
        n_rows = x.shape[0]
        cos, sin = self.cos_table[positions], self.sin_table[positions]                    # [N, hd/2]
        slots = np.concatenate([slots_for(c.block_table, c.start_pos, len(c.tokens), self.block_size)
                                for c in chunks])                                           # [N]
        groups = self._plan_groups(chunks)
        mirrored = [(g, positions[g.rows]) for g in groups if g.mirror_rows is not None]   # [B] each
        attn = np.empty((n_rows, cfg.q_size), dtype=F32)                                     # [N, H*hd]
        for index, layer in enumerate(self.weights.layers):
            h = llama.rms_norm(x, layer.attn_norm, cfg.rms_norm_eps)                         # [N, d]
            q, k, v = llama.qkv_project(h, layer, cfg, cos, sin)                             # [N, H|KV, hd]
            self.kv.write(index, slots, k, v)
            for group, group_positions in mirrored:
                self.mirror.write(index, group.mirror_rows, group_positions,
                                  k[group.rows], v[group.rows])
            q *= self.scale
            if len(groups) == 1 and groups[0].rows.shape[0] == n_rows:   # rows already in order
                attn = self._attend(q, index, groups[0])
            else:
                for group in groups:
                    attn[group.rows] = self._attend(q[group.rows], index, group)
            x += attn @ layer.wo                                                             # [N, H*hd] @ [H*hd, d]
            h = llama.rms_norm(x, layer.mlp_norm, cfg.rms_norm_eps)                          # [N, d]
            x += llama.mlp(h, layer, cfg.intermediate_size)                                  # [N, d]
        return x

    @staticmethod
    def _logit_rows(chunks: list[Chunk]) -> np.ndarray:
        rows, end = [], 0
        for c in chunks:
            end += len(c.tokens)
            rows.extend(range(end - c.num_logits, end))
        return np.asarray(rows, dtype=np.int64)

    # ----------------------------------------------------------------- attention

    def _plan_groups(self, chunks: list[Chunk]) -> list[_Group]:
        """Group chunks by query count; cut long single prefills into score-sized pieces.

        A member is (first row in x, start position, block table, sequence id). Multi-row
        chunks of one length share a group while its scores [B, KV, G*n, max end] fit
        MAX_SCORE_ELEMENTS; the next one that would not fit starts a new group.
        """
        limit, heads = llama.MAX_SCORE_ELEMENTS, self.config.num_heads
        by_length: dict[int, list[list[tuple[int, int, tuple[int, ...], int]]]] = {}
        pieces: list[_Group] = []
        first_row = 0
        for c in chunks:
            n = len(c.tokens)
            max_queries = max(1, limit // (heads * (c.start_pos + n)))
            member = (first_row, c.start_pos, c.block_table, c.seq_id)
            if n <= max_queries:
                batches = by_length.setdefault(n, [[]])
                if n > 1 and not _fits(batches[-1] + [member], n, heads, limit):
                    batches.append([])
                batches[-1].append(member)
            else:
                for off in range(0, n, max_queries):
                    piece = (first_row + off, c.start_pos + off, c.block_table, c.seq_id)
                    pieces.append(self._make_group(min(max_queries, n - off), [piece]))
            first_row += n
        decode = by_length.pop(1, None)
        groups = [self._make_group(n, members) for n, batches in by_length.items()
                  for members in batches] + pieces
        if decode is not None:
            groups.append(self._decode_group(decode[0]))
        return groups

    def _decode_group(self, members: list) -> _Group:
        """The one-token rows: through the decode mirror when it can hold them, else gathered."""
        if self.mirror is None or min(m[3] for m in members) < 0:
            return self._make_group(1, members)
        rows = self.mirror.prepare([(seq_id, start, table) for _, start, table, seq_id in members], 1)
        if rows is None:
            return self._make_group(1, members)
        span = self.mirror.num_rows
        ends = np.zeros(span, dtype=np.int64)                                               # [R]
        ends[rows] = [start + 1 for _, start, _, _ in members]
        length = int(ends.max())
        ends[ends == 0] = length                                                            # idle rows: finite garbage
        hidden = np.arange(length)[None, :] >= ends[:, None]                                # [R, L]
        bias = np.where(hidden, F32(-np.inf), F32(0.0)).astype(F32)[:, None, None, :]       # [R, 1, 1, L]
        x_rows = np.asarray([m[0] for m in members], dtype=np.int64)                        # [B]
        in_order = span == len(members) and bool(np.all(rows == np.arange(span)))
        return _Group(x_rows, np.zeros((0, 0), np.int64), bias if hidden.any() else None,
                      len(members), 1, mirror_rows=rows, mirror_span=span, mirror_tokens=length,
                      mirror_in_order=in_order)

    def _make_group(self, n: int, members: list[tuple[int, int, tuple[int, ...], int]]) -> _Group:
        """A gathered group: members' blocks are copied out of the pools each layer.

        Leading blocks that every member's table holds (a shared system prompt from the
        prefix cache) and that every query sees are split off as `shared_blocks`: they
        are gathered once, not once per member. `block_index` and `bias` cover the rest.
        """
        bs, groups = self.block_size, self.group_size
        batch = len(members)
        shared = self._num_shared_blocks(members)                                           # S_b
        ends = np.asarray([start + n for _, start, _, _ in members])                         # [B]
        num_blocks = int(-(-ends.max() // bs)) - shared
        block_index = np.zeros((batch, num_blocks), dtype=np.int64)                         # [B, nb]
        for b, (_, start, table, _) in enumerate(members):
            used = -(-(start + n) // bs)
            block_index[b, :used - shared] = table[shared:used]
        rows = np.concatenate([np.arange(m[0], m[0] + n) for m in members])                 # [B*n]
        q_pos = np.asarray([m[1] for m in members])[:, None] + np.arange(n)                 # [B, n]
        k_pos = np.arange(shared * bs, (shared + num_blocks) * bs)                          # [L]
        hidden = k_pos[None, None, :] > q_pos[:, :, None]                                   # [B, n, L]
        bias = np.where(hidden, F32(-np.inf), F32(0.0)).astype(F32)                         # [B, n, L]
        if n == 1:
            bias = bias[:, None]                                                            # [B, 1, 1, L]
        else:
            bias = np.broadcast_to(bias[:, None], (batch, groups, n, bias.shape[-1]))
            bias = bias.reshape(batch, 1, groups * n, -1)                                   # [B, 1, G*n, L]
        shared_blocks = np.asarray(members[0][2][:shared], dtype=np.int64) if shared else None
        return _Group(rows, block_index, np.ascontiguousarray(bias), batch, n,
                      shared_blocks=shared_blocks)

    def _num_shared_blocks(self, members: list[tuple[int, int, tuple[int, ...], int]]) -> int:
        """Leading blocks identical in every member's table and wholly before every query."""
        if len(members) < 2:
            return 0
        limit = min(start for _, start, _, _ in members) // self.block_size
        first = members[0][2]
        count = 0
        while count < limit and all(m[2][count] == first[count] for m in members):
            count += 1
        return count

    def _attend(self, q: np.ndarray, layer: int, g: _Group) -> np.ndarray:
        """Paged causal attention for one group: q [B*n, H, hd] (pre-scaled) -> [B*n, H*hd]."""
        cfg = self.config
        kvh, hd, grp, b, n = cfg.num_kv_heads, cfg.head_dim, self.group_size, g.batch, g.num_queries
        qg = q.reshape(b, n, kvh, grp, hd).transpose(0, 2, 3, 1, 4).reshape(b, kvh, grp * n, hd)
        if g.mirror_rows is not None:
            return self._attend_mirror(qg, layer, g)
        keys, values = self.kv.gather(layer, g.block_index)                                  # [B, L, KV, hd]
        scores = qg @ keys.transpose(0, 2, 3, 1)                                            # [B, KV, G*n, L]
        scores += g.bias
        num_shared = 0
        if g.shared_blocks is not None:
            shared_keys, shared_values = self.kv.gather_blocks(layer, g.shared_blocks)       # [S, KV, hd]
            num_shared = shared_keys.shape[0]
            scores = np.concatenate([_shared_scores(qg, shared_keys), scores], axis=-1)     # [B, KV, G*n, S+L]
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)                                        # softmax over keys
        ctx = scores[..., num_shared:] @ values.transpose(0, 2, 1, 3)                       # [B, KV, G*n, hd]
        if num_shared:
            ctx += _shared_context(scores[..., :num_shared], shared_values)                 # [B, KV, G*n, hd]
        ctx = ctx.reshape(b, kvh, grp, n, hd).transpose(0, 3, 1, 2, 4)                      # [B, n, KV, G, hd]
        return ctx.reshape(b * n, cfg.q_size)                                               # [B*n, H*hd]

    def _attend_mirror(self, qg: np.ndarray, layer: int, g: _Group) -> np.ndarray:
        """Decode rows over the mirror's dense rows (views, no gather): qg [B, KV, G, hd].

        In the usual case the members own mirror rows 0..B-1 in order and qg is used as
        is; otherwise it is scattered into the rows (idle rows attend with zeros and are
        dropped). Either way each row's numbers are the same: a batched matmul treats
        every [G, hd] @ [hd, L] product on its own.
        """
        cfg = self.config
        span, length = g.mirror_span, g.mirror_tokens
        if g.mirror_in_order:
            q_all = qg                                                                      # [R=B, KV, G, hd]
        else:
            q_all = np.zeros((span,) + qg.shape[1:], dtype=F32)                             # [R, KV, G, hd]
            q_all[g.mirror_rows] = qg
        keys, values = self.mirror.views(layer, span, length)                               # [R, KV, L, hd] each
        scores = q_all @ keys.transpose(0, 1, 3, 2)                                         # [R, KV, G, L]
        if g.bias is not None:                                                              # rows of unequal length
            scores += g.bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        ctx = scores @ values                                                               # [R, KV, G, hd]
        norm = scores.sum(axis=-1, keepdims=True)                                           # [R, KV, G, 1]
        if not g.mirror_in_order:
            ctx, norm = ctx[g.mirror_rows], norm[g.mirror_rows]                             # [B, KV, G, hd|1]
        ctx /= norm                                                                         # softmax, normalised late
        return ctx.reshape(g.batch, cfg.q_size)                                             # [B, H*hd]


def _fits(members: list[tuple[int, int, tuple[int, ...], int]], n: int, heads: int, limit: int) -> bool:
    """Whether members' n-query group keeps its scores [B, H*n, max end] within limit elements.

    A lone member always fits (it passed the per-chunk cut already).
    """
    longest = max(start + n for _, start, _, _ in members)
    return len(members) == 1 or len(members) * heads * n * longest <= limit


# --------------------------------------------------------------------------- shared prefix

def _shared_scores(qg: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Every member's queries against the keys they all share, one gemm per KV head.

    qg [B, KV, Gn, hd], keys [S, KV, hd] -> scores [B, KV, Gn, S]. Stacking the members'
    queries turns B small [Gn, hd] @ [hd, S] products into one [B*Gn, hd] @ [hd, S].
    """
    b, kvh, gn, hd = qg.shape
    rows = qg.transpose(1, 0, 2, 3).reshape(kvh, b * gn, hd)                           # [KV, B*Gn, hd]
    keys_hm = np.ascontiguousarray(keys.transpose(1, 0, 2))                            # [KV, S, hd]
    scores = rows @ keys_hm.transpose(0, 2, 1)                                         # [KV, B*Gn, S]
    return scores.reshape(kvh, b, gn, -1).transpose(1, 0, 2, 3)                        # [B, KV, Gn, S]


def _shared_context(probs: np.ndarray, values: np.ndarray) -> np.ndarray:
    """probs [B, KV, Gn, S] @ the shared values [S, KV, hd] -> [B, KV, Gn, hd], one gemm per head."""
    b, kvh, gn, s = probs.shape
    rows = probs.transpose(1, 0, 2, 3).reshape(kvh, b * gn, s)                         # [KV, B*Gn, S]
    ctx = rows @ values.transpose(1, 0, 2)                                             # [KV, B*Gn, hd]
    return ctx.reshape(kvh, b, gn, -1).transpose(1, 0, 2, 3)                           # [B, KV, Gn, hd]
