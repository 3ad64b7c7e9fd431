"""Greedy decoding of many rows at once through the model runner, each row on its own adapter.

The LoRA tests drive `engine/core/runner.py`'s `ModelRunner` directly (the engine's
scheduler does not name adapters yet): every row's prompt is prefilled in pieces of
`prefill_tokens` in the same steps as the others, then all rows decode together, one token
a step, through the decode mirror, until each has its tokens or a stop id. Each step's
float32 logits give the row's greedy id and its top-5 logprobs (log_softmax in float64, as
the oracle computes them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.core.chunk import Chunk
from engine.core.runner import ModelRunner
from engine.kv.pools import KVCache
from engine.model.lora import LoraAdapter
from engine.model.lora_merge import MergedCache
from engine.model.spec import Model

BLOCK_SIZE = 8
TOP_K = 5


@dataclass(frozen=True)
class Row:
    prompt_ids: tuple[int, ...]
    adapter: LoraAdapter | None          # None: the base alone
    max_new_tokens: int = 16


@dataclass
class RowResult:
    ids: list[int] = field(default_factory=list)
    top5: list[list[tuple[int, float]]] = field(default_factory=list)   # per output token
    chosen_logprob: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class RowsRun:
    results: list[RowResult]           # one per row, in order
    merges: MergedCache                # which path the steps took (its counts)


def _record(result: RowResult, logits: np.ndarray) -> int:
    """Greedy id of one step's logits [V]; its top-5 logprobs go into `result`."""
    wide = logits.astype(np.float64)
    shifted = wide - wide.max()
    logprobs = shifted - np.log(np.exp(shifted).sum())                 # [V]
    best = np.argsort(-logprobs, kind="stable")[:TOP_K]
    token = int(np.argmax(logits))
    result.ids.append(token)
    result.top5.append([(int(t), float(logprobs[t])) for t in best])
    result.chosen_logprob.append(float(logprobs[token]))
    return token


def greedy_rows(model: Model, rows: list[Row], stop_ids=(), prefill_tokens: int = 8, *,
                lora_merge: bool = True) -> RowsRun:
    """Run every row to its max_new_tokens or a stop id, all in the same steps (a step
    whose rows are all on one adapter on its merged weights unless `lora_merge` is off)."""
    cfg = model.config
    blocks_per_row = -(-max(len(r.prompt_ids) + r.max_new_tokens for r in rows) // BLOCK_SIZE)
    kv = KVCache(cfg, blocks_per_row * len(rows), BLOCK_SIZE)
    runner = ModelRunner(cfg, model.weights, kv, cfg.max_position_embeddings,
                         mirror_bytes=kv.nbytes, lora_merge=lora_merge)
    tables = [tuple(range(i * blocks_per_row, (i + 1) * blocks_per_row)) for i in range(len(rows))]
    results = [RowResult() for _ in rows]
    computed = [0] * len(rows)                       # positions whose K/V are written
    pending = [list(r.prompt_ids) for r in rows]     # tokens not computed yet
    stops = set(stop_ids)
    while True:
        chunks, owners = [], []
        for i, row in enumerate(rows):
            if not pending[i]:
                continue
            take = pending[i][:prefill_tokens]
            last = len(take) == len(pending[i])
            chunks.append(Chunk(tuple(take), computed[i], tables[i], 1 if last else 0, i,
                                adapter=row.adapter))
            owners.append((i, last))
        if not chunks:
            return RowsRun(results, runner.merges)
        logits = runner.forward(chunks)                                # [R, V]
        logit_row = 0
        for (i, last), chunk in zip(owners, chunks):
            computed[i] += len(chunk.tokens)
            del pending[i][:len(chunk.tokens)]
            if not last:
                continue
            token = _record(results[i], logits[logit_row])
            logit_row += 1
            if token not in stops and len(results[i].ids) < rows[i].max_new_tokens:
                pending[i] = [token]
