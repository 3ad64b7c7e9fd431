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

Attention groups chunks of equal length (the plan: `engine/core/attention_plan.py`, made
once per step and reused by every layer), gathers their blocks as `[B, L, KV, hd]` and
runs batched matmuls over `[B, KV, G*n, ...]`; a key is visible to a query iff its
position is <= the query's (and, in a sliding layer, inside its window: such a layer
gathers only the blocks its windows reach, and slices the decode mirror's rows to them;
with a window pool, engine/kv/window.py, it writes and reads them by the window table).
Leading blocks that all of a group's members share (a system prompt from the prefix
cache) are gathered once and met by one gemm per KV head over all members' queries,
instead of B copies and B small gemms. The one-token (decode) rows instead read the
decode mirror (`engine/kv/mirror.py`), dense per-sequence copies kept up to date row by
row, so a decode step gathers nothing. The dense maths (norms, RoPE, the projections,
the MLP, the LM head) is `engine/model/llama.py`'s, reused as is, so the runner differs
from the dense reference only in where K/V live and which of them it reads.

Chunks on LoRA adapters (`Chunk.adapter`) share the step: every base matmul still runs
once over all N rows, and each adapter's low-rank products are added on its rows only
(engine/model/lora_batch.py: the rows are grouped once per step, every layer reuses it).
A step whose rows all run on ONE adapter instead runs the layers over that adapter's
merged weights, and adds nothing (engine/model/lora_merge.py: one merged adapter kept,
built on the first such step; `lora_merge=False` keeps every step on the grouped path).

What it is not: scheduling or sampling. Chunks in, logits out.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import numpy as np

from engine.core.attention_plan import AttentionGroup, AttentionPlanner, GatherGroup, MirrorGroup
from engine.core.chunk import Chunk
from engine.kv.mirror import DecodeMirror
from engine.kv.pools import KVCache, slots_for
from engine.model import llama
from engine.model.lora_batch import LoraBatch, add_low_rank
from engine.model.lora_merge import MergedCache
from engine.model.project import project
from engine.model.spec import LlamaWeights, ModelConfig

F32 = np.float32
T = TypeVar("T")
NO_ROWS = np.zeros(0, dtype=np.int64)        # no hidden rows wanted: plain generation steps
# Shared-prefix scores at least this large have their exp pass split over two threads:
# numpy's elementwise passes run on one core (BLAS uses both only inside a gemm), and they
# are most of a cached prefix's cost. Smaller arrays are not worth a thread hand-off.
PARALLEL_MIN_ELEMENTS = 1 << 18
# Decode attention over the mirror is split over the two threads from this many score
# elements (rows x heads x keys; 32 rows of 256 keys): below it the hand-off (~0.3 ms to
# wake the helper) costs more than half the work saves.
MIRROR_PARALLEL_MIN_ELEMENTS = 1 << 16
# A sliding layer's gathered queries go in blocks of this many rows, each over the keys
# its windows reach (a block of 256 and a window of 512 score ~770 keys, not n + 512).
WINDOW_QUERY_BLOCK = 256
# A sliding layer's decode rows share one slice of the mirror (from the earliest window
# start to the latest end) unless it spans more than this many windows: then each row
# reads exactly its own window (a loop over rows costs ~30 us a row; a slice that wide
# would read and score more than twice the keys).
MIRROR_ROW_SPLIT = 2


class ModelRunner:
    """Batched paged forward for one model and its KV pools."""

    def __init__(self, config: ModelConfig, weights: LlamaWeights, kv: KVCache, max_model_len: int,
                 *, mirror_bytes: int = 0, lora_merge: bool = True):
        self.config = config
        self.mirror = DecodeMirror(kv, config.num_layers, mirror_bytes) if mirror_bytes > 0 else None
        self.weights = weights
        self.kv = kv
        # Steps on one adapter alone run on its merged weights (lora_merge off: every step grouped).
        self.merges = MergedCache(weights.layers, enabled=lora_merge)
        self.block_size = kv.block_size
        self.group_size = config.num_heads // config.num_kv_heads      # G query heads per KV head
        self.scale = F32(config.attn_scale)
        # Sliding-window layers (Gemma 3) read the plan's window keys; all share one window.
        self.layer_is_local = [config.options.layer_window(i) is not None
                               for i in range(config.num_layers)]
        self.window_tokens = config.options.sliding_window if any(self.layer_is_local) else None
        self.planner = AttentionPlanner(config.num_heads, self.group_size, self.block_size, self.mirror,
                                        window_tokens=self.window_tokens)
        # RoPE angles for every position once, per layer (layers of one base share them):
        # [(cos [max_model_len, hd/2], sin [max_model_len, hd/2])] per layer.
        self.rope_tables = llama.rope_per_layer(config, np.arange(max_model_len))
        # One helper thread for the elementwise passes (numpy releases the GIL in them);
        # started on first use, idle otherwise.
        self.helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tl-runner")
        self.parallel_min_elements = PARALLEL_MIN_ELEMENTS
        self.mirror_parallel_min_elements = MIRROR_PARALLEL_MIN_ELEMENTS

    # ----------------------------------------------------------------- the step

    def forward(self, chunks: list[Chunk]) -> np.ndarray:
        """Run one step; return logits [sum(num_logits), V] in chunk order."""
        return self.forward_with_hidden(chunks, NO_ROWS)[0]

    def forward_with_hidden(self, chunks: list[Chunk],
                            hidden_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Run one step; return logits [R, V] in chunk order and the final-normed hidden
        states of `hidden_rows` (row indices into the step's N rows) [E, d]: embeddings."""
        cfg, w = self.config, self.weights
        ids = np.fromiter((t for c in chunks for t in c.tokens), dtype=np.int64)           # [N]
        positions = np.concatenate([np.arange(c.start_pos, c.start_pos + len(c.tokens)) for c in chunks])
        x = llama.embed(w, ids, cfg.options.embed_scale)                                    # [N, d]
        if w.layers:
            x = self._layers(x, chunks, positions)
        logit_rows = self._logit_rows(chunks)                                               # [R]
        rows = np.concatenate([logit_rows, hidden_rows])                                    # [R+E]
        h = llama.rms_norm(x[rows], w.final_norm, cfg.rms_norm_eps)                         # [R+E, d]
        num_logits = logit_rows.shape[0]
        return llama.logits_from_hidden(w, h[:num_logits]), h[num_logits:]                 # [R, V], [E, d]

    def _layers(self, x: np.ndarray, chunks: list[Chunk], positions: np.ndarray) -> np.ndarray:
        cfg = self.config
        n_rows = x.shape[0]
        step_ropes: dict[int, tuple[np.ndarray, np.ndarray]] = {}                           # by table id
        for cos_table, sin_table in self.rope_tables:
            step_ropes.setdefault(id(cos_table), (cos_table[positions], sin_table[positions]))  # [N, hd/2]
        slots = np.concatenate([slots_for(c.block_table, c.start_pos, len(c.tokens), self.block_size)
                                for c in chunks])                                           # [N]
        window_slots = slots                                                                # [N]: the window pool's
        if any(self.kv.in_window_pool):
            window_slots = np.concatenate([
                slots_for(c.block_table if c.window_table is None else c.window_table,
                          c.start_pos, len(c.tokens), self.block_size) for c in chunks])
        groups = self.planner.plan(chunks)
        lora = LoraBatch.of_chunks([c.adapter for c in chunks], [len(c.tokens) for c in chunks])
        layers = self.weights.layers                        # the base's, or one adapter's merged
        merged = self.merges.for_step(lora, n_rows)
        if merged is not None:
            layers, lora = merged.layers, None              # its products are in the weights
        mirrored = [(g, positions[g.rows]) for g in groups if isinstance(g, MirrorGroup)]  # [B] each
        attn = np.empty((n_rows, cfg.q_size), dtype=F32)                                     # [N, H*hd]
        for index, layer in enumerate(layers):
            h = llama.rms_norm(x, layer.attn_norm, cfg.rms_norm_eps)                         # [N, d]
            cos, sin = step_ropes[id(self.rope_tables[index][0])]                            # [N, hd/2]
            layer_lora = None if lora is None else lora.layer(index)                        # this step's adapter rows
            q, k, v = llama.qkv_project(h, layer, cfg, cos, sin, layer_lora)                 # [N, H|KV, hd]
            self.kv.write(index, window_slots if self.kv.in_window_pool[index] else slots, k, v)
            for group, group_positions in mirrored:
                self.mirror.write(index, group.mirror_rows, group_positions,
                                  k[group.rows], v[group.rows])
            q *= self.scale
            if len(groups) == 1 and groups[0].rows.shape[0] == n_rows:   # rows already in order
                attn = self._attend(q, index, groups[0])
            else:
                for group in groups:
                    attn[group.rows] = self._attend(q[group.rows], index, group)
            out = project(attn, layer.wo)                                                   # [N, H*hd] @ [H*hd, d]
            if layer_lora is not None:
                add_low_rank(out, attn, layer_lora.o)
            x += llama.post_norm(out, layer.post_attn_norm, cfg)                             # [N, d]
            h = llama.rms_norm(x, layer.mlp_norm, cfg.rms_norm_eps)                          # [N, d]
            x += llama.post_norm(llama.mlp(h, layer, cfg.intermediate_size, cfg.options.mlp_activation,
                                           layer_lora), layer.post_mlp_norm, cfg)            # [N, d]
        return x

    @staticmethod
    def _logit_rows(chunks: list[Chunk]) -> np.ndarray:
        rows, end = [], 0
        for c in chunks:
            end += len(c.tokens)
            rows.extend(range(end - c.num_logits, end))
        return np.asarray(rows, dtype=np.int64)

    # ----------------------------------------------------------------- attention

    def _attend(self, q: np.ndarray, layer: int, g: AttentionGroup) -> np.ndarray:
        """Paged causal attention for one group: q [B*n, H, hd] (pre-scaled) -> [B*n, H*hd]."""
        cfg = self.config
        kvh, hd, grp, b, n = cfg.num_kv_heads, cfg.head_dim, self.group_size, g.batch, g.num_queries
        qg = q.reshape(b, n, kvh, grp, hd).transpose(0, 2, 3, 1, 4).reshape(b, kvh, grp * n, hd)
        local = self.layer_is_local[layer]
        if isinstance(g, MirrorGroup):
            return self._attend_mirror(qg, layer, g, local)
        if local and g.window is not None:                              # the window's blocks only
            return self._attend_window(qg, layer, g)
        if local and g.local is not None:                               # the window pool's blocks
            return self._attend_gathered(qg, layer, g.local)
        return self._attend_gathered(qg, layer, g)

    def _attend_gathered(self, qg: np.ndarray, layer: int, g: GatherGroup) -> np.ndarray:
        """A gathered group's queries qg [B, KV, G*n, hd] over its blocks -> [B*n, H*hd],
        under the group's causal mask.

        With shared leading blocks the keys come in two parts, the shared ones (scored by one
        gemm per KV head, `_shared_scores`) and each member's own; the softmax runs over both
        without joining them: one shift (the max over both parts), exp in place, and the
        division by the sum of both parts applied late, to the [.., hd] context rather than to
        the [.., L] scores. Every pass over the scores costs as much as the gemm that made them.
        """
        cfg = self.config
        kvh, hd, grp, b, n = cfg.num_kv_heads, cfg.head_dim, self.group_size, g.batch, g.num_queries
        keys, values = self.kv.gather(layer, g.block_index)                                  # [B, L, KV, hd]
        scores = qg @ keys.transpose(0, 2, 3, 1)                                            # [B, KV, G*n, L]
        scores += g.bias
        shift = scores.max(axis=-1)                                                         # [B, KV, G*n]
        shared = None
        if g.shared_blocks is not None:
            shared_keys, shared_values = self.kv.gather_blocks(layer, g.shared_blocks)       # [S, KV, hd]
            shared = _shared_scores(qg, shared_keys)                                        # [KV, B*G*n, S]
            np.maximum(shift, _per_member(shared.max(axis=-1), b), out=shift)
        scores -= shift[..., None]
        np.exp(scores, out=scores)
        norm = scores.sum(axis=-1)                                                          # [B, KV, G*n]
        ctx = scores @ values.transpose(0, 2, 1, 3)                                         # [B, KV, G*n, hd]
        if shared is not None:
            norm += _per_member(self._exp_rows(shared, _per_head(shift)), b)
            ctx += _per_member(shared @ shared_values.transpose(1, 0, 2), b)                # [B, KV, G*n, hd]
        ctx /= norm[..., None]                                                              # softmax, normalised late
        ctx = ctx.reshape(b, kvh, grp, n, hd).transpose(0, 3, 1, 2, 4)                      # [B, n, KV, G, hd]
        return ctx.reshape(b * n, cfg.q_size)                                               # [B*n, H*hd]

    def _attend_window(self, qg: np.ndarray, layer: int, g: GatherGroup) -> np.ndarray:
        """A sliding layer's gathered group: qg [B, KV, G*n, hd] over the blocks its windows
        reach (`g.window`) -> [B*n, H*hd].

        Queries go in blocks of WINDOW_QUERY_BLOCK; a block's queries i0..i1-1 see only the
        keys from (earliest query - window + 1) to their latest, so each block scores one
        slice of the gathered keys (about block + window of them), not all n + window: a
        long prefill chunk does a fraction of the work. The slice is common to the members
        (from the earliest member's window start to the latest member's end: members past
        the window's length differ by less than a block there); the mask hides the rest.
        """
        cfg, w, window = self.config, g.window, self.window_tokens
        kvh, hd, grp, b, n = cfg.num_kv_heads, cfg.head_dim, self.group_size, g.batch, g.num_queries
        keys, values = self.kv.gather(layer, w.block_index)                                 # [B, Lw, KV, hd]
        kt, vt = keys.transpose(0, 2, 3, 1), values.transpose(0, 2, 1, 3)                   # [B, KV, hd|Lw, Lw|hd]
        length = kt.shape[-1]
        q5 = qg.reshape(b, kvh, grp, n, hd)                                                 # [B, KV, G, n, hd]
        bias5 = w.bias.reshape(b, 1, grp if n > 1 else 1, n, length)                        # [B, 1, G|1, n, Lw]
        ctx = np.empty((b, kvh, grp, n, hd), dtype=F32)                                     # [B, KV, G, n, hd]
        first_offset, last_offset = int(w.query_offsets.min()), int(w.query_offsets.max())
        for i0 in range(0, n, WINDOW_QUERY_BLOCK):
            i1 = min(n, i0 + WINDOW_QUERY_BLOCK)
            lo, hi = max(0, first_offset + i0 - window + 1), min(length, last_offset + i1)
            rows = i1 - i0
            qb = q5[:, :, :, i0:i1].reshape(b, kvh, grp * rows, hd)                         # [B, KV, G*Q, hd]
            scores = qb @ kt[..., lo:hi]                                                    # [B, KV, G*Q, Lq]
            scores.reshape(b, kvh, grp, rows, hi - lo)[...] += bias5[..., i0:i1, lo:hi]
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            part = scores @ vt[:, :, lo:hi]                                                 # [B, KV, G*Q, hd]
            part /= scores.sum(axis=-1, keepdims=True)
            ctx[:, :, :, i0:i1] = part.reshape(b, kvh, grp, rows, hd)
        return ctx.transpose(0, 3, 1, 2, 4).reshape(b * n, cfg.q_size)                      # [B*n, H*hd]

    def _exp_rows(self, scores: np.ndarray, shift: np.ndarray) -> np.ndarray:
        """scores [KV, R, S] -> exp(scores - shift) in place; returns the row sums [KV, R].

        A large array is cut in two halves of rows, one on the helper thread: the same
        arithmetic on the same elements, so the result does not depend on the split."""
        def rows(a: int, b: int) -> np.ndarray:
            return _exp_shifted(scores[:, a:b], shift[:, a:b])
        if scores.size < self.parallel_min_elements:
            return rows(0, scores.shape[1])
        return np.concatenate(self._in_two_halves(scores.shape[1], rows), axis=1)          # [KV, R]

    def _in_two_halves(self, num_rows: int, work: Callable[[int, int], T]) -> list[T]:
        """[work(0, h), work(h, num_rows)] with h = num_rows // 2, the second half on the
        helper thread meanwhile (numpy releases the GIL in its passes and gemms); one call
        for fewer than two rows."""
        if num_rows < 2:
            return [work(0, num_rows)]
        half = num_rows // 2
        other = self.helper.submit(work, half, num_rows)
        first = work(0, half)
        return [first, other.result()]

    def _attend_mirror(self, qg: np.ndarray, layer: int, g: MirrorGroup, local: bool) -> np.ndarray:
        """Decode rows over the mirror's dense rows (views, no gather): qg [B, KV, G, hd].

        In the usual case the members own mirror rows 0..B-1 in order and qg is used as
        is; otherwise it is scattered into the rows (idle rows attend with zeros and are
        dropped). Either way each row's numbers are the same: a batched matmul treats
        every [G, hd] @ [hd, L] product on its own. A large group's rows are cut in two
        halves, one on the helper thread: each row's arithmetic is unchanged, and the two
        cores stream the mirror's K/V (the step's largest reads after the weights).

        Rows attend over the positions from their earliest key to their latest end: in a
        sliding layer (`local`) from the earliest window start, so the scores and the reads
        cover the windows, not the whole context. Rows whose windows lie far apart (a slice
        over all of them would span more than MIRROR_ROW_SPLIT windows) go one by one, each
        over exactly its window.
        """
        cfg = self.config
        span = g.span_rows
        if g.in_order:
            q_all = qg                                                                      # [R=B, KV, G, hd]
        else:
            q_all = np.zeros((span,) + qg.shape[1:], dtype=F32)                             # [R, KV, G, hd]
            q_all[g.mirror_rows] = qg
        keys, values = self.mirror.views(layer, span, g.num_tokens)                         # [R, KV, L, hd] each
        ctx = np.empty(q_all.shape, dtype=F32)                                              # [R, KV, G, hd]
        bias = g.local_bias if local else g.bias                                            # [R, 1, 1, L] or None
        starts = g.window_starts if local else None                                         # [R] or None

        def rows(a: int, b: int) -> None:
            lo = 0 if starts is None else int(starts[a:b].min())
            hi = int(g.ends[a:b].max())
            if starts is not None and b - a > 1 and hi - lo > MIRROR_ROW_SPLIT * self.window_tokens:
                for r in range(a, b):                                                       # exactly its window
                    lo_r, hi_r = int(starts[r]), int(g.ends[r])
                    _mirror_softmax_ctx(q_all[r:r + 1], keys[r:r + 1, :, lo_r:hi_r],
                                        values[r:r + 1, :, lo_r:hi_r], None, ctx[r:r + 1])
                return
            rows_bias = None if bias is None else bias[a:b, ..., lo:hi]                     # [r, 1, 1, hi-lo]
            _mirror_softmax_ctx(q_all[a:b], keys[a:b, :, lo:hi], values[a:b, :, lo:hi], rows_bias, ctx[a:b])
        positions = g.num_tokens if starts is None else min(g.num_tokens, self.window_tokens)
        elements = span * q_all.shape[1] * q_all.shape[2] * positions                       # score elements
        if elements < self.mirror_parallel_min_elements:
            rows(0, span)
        else:
            self._in_two_halves(span, rows)
        if not g.in_order:
            ctx = ctx[g.mirror_rows]                                                        # [B, KV, G, hd]
        return ctx.reshape(g.batch, cfg.q_size)                                             # [B, H*hd]


def _mirror_softmax_ctx(q: np.ndarray, keys: np.ndarray, values: np.ndarray,
                        bias: np.ndarray | None, out: np.ndarray) -> None:
    """out = softmax(q K^T + bias) V for rows of the mirror: q/out [r, KV, G, hd], keys and
    values [r, KV, L, hd], bias [r, 1, 1, L] or None; normalised late, on the context."""
    scores = q @ keys.transpose(0, 1, 3, 2)                                                 # [r, KV, G, L]
    if bias is not None:                                                                    # rows of unequal length
        scores += bias
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    np.matmul(scores, values, out=out)                                                      # [r, KV, G, hd]
    out /= scores.sum(axis=-1, keepdims=True)


# --------------------------------------------------------------------------- shared prefix

def _shared_scores(qg: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Every member's queries against the keys they all share, one gemm per KV head.

    qg [B, KV, Gn, hd], keys [S, KV, hd] -> scores [KV, B*Gn, S]. Stacking the members'
    queries turns B small [Gn, hd] @ [hd, S] products into one [B*Gn, hd] @ [hd, S]; the
    result stays in that head-major layout (`_per_member` views its reductions per member).
    """
    b, kvh, gn, hd = qg.shape
    rows = qg.transpose(1, 0, 2, 3).reshape(kvh, b * gn, hd)                           # [KV, B*Gn, hd]
    keys_hm = np.ascontiguousarray(keys.transpose(1, 0, 2))                            # [KV, S, hd]
    return rows @ keys_hm.transpose(0, 2, 1)                                           # [KV, B*Gn, S]


def _exp_shifted(scores: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """scores [KV, R, S] -= shift [KV, R]; exp in place; returns the sums over S [KV, R]."""
    scores -= shift[..., None]
    np.exp(scores, out=scores)
    return scores.sum(axis=-1)


def _per_member(head_major: np.ndarray, batch: int) -> np.ndarray:
    """[KV, B*Gn, ...] -> a [B, KV, Gn, ...] view: the shared part's rows, member first."""
    kvh, rows = head_major.shape[:2]
    shape = (kvh, batch, rows // batch) + head_major.shape[2:]
    return head_major.reshape(shape).swapaxes(0, 1)


def _per_head(member_major: np.ndarray) -> np.ndarray:
    """[B, KV, Gn] -> [KV, B*Gn]: a per-query value in the shared part's row order."""
    b, kvh, gn = member_major.shape
    return member_major.transpose(1, 0, 2).reshape(kvh, b * gn)
