"""Embeddings as engine work: each input is packed into the steps as prefill-only rows.

An embeddings call (n inputs) becomes an `EmbedJob` of n `EmbedPart`s. Every step, after
the scheduler has placed the generation rows, the parts take what is left of
`max_batched_tokens`; while a token is awaited, only what the step's prompt rows left of
the scheduler's latency allowance (`Scheduler.latency_allowance`: the rows that keep the
step within `itl_target_ms`, at least `tokens_beside_decode`), so a running chat keeps its
pace while a big embeddings call runs:

* a part starts only when blocks for its WHOLE input can be had and a block of growth room
  per running sequence stays available, so a started part always finishes within a few
  steps and never takes the room a running chat needs next;
* each step it computes up to `prefill_chunk` of its tokens as a chunk with no logits
  (nothing is sampled); the runner returns the final-normed hidden rows of the chunk
  [n, d], which are summed into the part's running sum [d] (float64);
* with sliding-window layers it holds window blocks (engine/kv/window.py) for its whole
  input too, like its blocks: a part is short-lived, so nothing is dropped on the way;
* after its last token its blocks are released at once (no KV is kept and nothing is
  offered to the prefix cache) and its vector is the mean over its tokens, L2-normalised;
* when every part of a job is done the job's vectors [n, d] are ready (`take_finished`).

What it is not: scheduling of generation or the forward pass; the engine calls it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from engine.core.chunk import Chunk
from engine.errors import InvalidRequest, PromptTooLong
from engine.kv.blocks import BlockManager

MIN_NORM = 1e-12                       # an all-zero pooled vector stays zero, not NaN


def embed_budget_tokens(rest_tokens: int, room_tokens: int, is_sampling: bool) -> int:
    """This step's embedding budget: the rest of the step; while a token is awaited, only
    what the step's prompt rows left of the latency policy's allowance (`room_tokens`:
    `Scheduler.latency_allowance` minus them; a step's time grows with its rows, and a
    chat's inter-token gap is one step)."""
    return max(0, min(rest_tokens, room_tokens)) if is_sampling else rest_tokens


@dataclass(frozen=True, slots=True)
class EmbedDone:
    """A finished embeddings job: one mean-pooled, L2-normalised vector per input."""
    job_id: int
    vectors: np.ndarray                # [n, d] float32


class EmbedJob:
    __slots__ = ("id", "vectors", "num_left")

    def __init__(self, job_id: int, num_inputs: int, hidden_size: int):
        self.id = job_id
        self.vectors = np.zeros((num_inputs, hidden_size), dtype=np.float32)   # [n, d]
        self.num_left = num_inputs


class EmbedPart:
    """One input of a job on its way through the steps."""
    __slots__ = ("job", "index", "tokens", "num_computed", "blocks", "window_blocks", "hidden_sum")

    def __init__(self, job: EmbedJob, index: int, tokens: tuple[int, ...], hidden_size: int):
        self.job, self.index, self.tokens = job, index, tokens
        self.num_computed = 0
        self.blocks: list[int] = []
        self.window_blocks: list[int] = []                                     # window pool only
        self.hidden_sum = np.zeros(hidden_size, dtype=np.float64)              # [d]


@dataclass(frozen=True, slots=True)
class EmbedChunk:
    """A part's tokens computed in this step."""
    part: EmbedPart
    num_tokens: int

    def chunk(self) -> Chunk:
        part, start = self.part, self.part.num_computed
        return Chunk(part.tokens[start:start + self.num_tokens], start, tuple(part.blocks), 0,
                     window_table=tuple(part.window_blocks) if part.window_blocks else None)


class EmbeddingQueue:
    """Jobs not started, parts in progress (holding blocks), and finished jobs."""

    def __init__(self, blocks: BlockManager, hidden_size: int, prefill_chunk_tokens: int,
                 max_model_len: int):
        self.blocks = blocks
        self.hidden_size = hidden_size
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.max_model_len = max_model_len
        self.pending: deque[EmbedPart] = deque()
        self.active: list[EmbedPart] = []
        self.finished: list[EmbedDone] = []
        self._jobs: dict[int, EmbedJob] = {}
        self._next_id = 0

    def add(self, inputs) -> int:
        """Queue one call's inputs (token-id lists); its job id. Refuses what could never run."""
        tokens = [tuple(int(t) for t in ids) for ids in inputs]
        for ids in tokens:
            if not ids:
                raise InvalidRequest("an embedding input needs at least one token")
            if len(ids) > self.max_model_len:
                raise PromptTooLong(f"an embedding input of {len(ids)} tokens exceeds the "
                                    f"context of {self.max_model_len}")
            room_blocks = min(self._num_window_blocks(), self.blocks.num_blocks)
            if self.blocks.blocks_for_tokens(len(ids)) > room_blocks:
                raise PromptTooLong("an embedding input does not fit in the KV cache")
        job = EmbedJob(self._next_id, len(tokens), self.hidden_size)
        self._next_id += 1
        self._jobs[job.id] = job
        self.pending.extend(EmbedPart(job, i, ids, self.hidden_size) for i, ids in enumerate(tokens))
        if not tokens:
            self._complete(job)
        return job.id

    def _num_window_blocks(self) -> int:
        window = self.blocks.window
        return self.blocks.num_blocks if window is None else window.num_blocks

    def _take_blocks(self, part: EmbedPart, reserve_blocks: int) -> bool:
        """Blocks for the part's whole input (both pools), leaving `reserve_blocks` spare."""
        needed = self.blocks.blocks_for_tokens(len(part.tokens))
        window = self.blocks.window
        if window is not None and window.num_available_blocks < needed + reserve_blocks:
            return False
        if self.blocks.num_available_blocks < needed + reserve_blocks \
                or not self.blocks.grow(part.blocks, len(part.tokens)):
            return False
        return window is None or window.cover(part.window_blocks, len(part.tokens))

    def _release(self, part: EmbedPart) -> None:
        self.blocks.release(part.blocks)
        if self.blocks.window is not None:
            self.blocks.window.release(part.window_blocks)
        part.blocks, part.window_blocks = [], []

    def has_work(self) -> bool:
        return bool(self.pending or self.active)

    def schedule(self, budget_tokens: int, reserve_blocks: int) -> list[EmbedChunk]:
        """Parts for this step within `budget_tokens`: those in progress first, then new ones
        while their whole input's blocks (plus `reserve_blocks` spare) are available."""
        items: list[EmbedChunk] = []
        for part in self.active:
            if budget_tokens <= 0:
                return items
            items.append(self._piece(part, budget_tokens))
            budget_tokens -= items[-1].num_tokens
        while self.pending and budget_tokens > 0:
            part = self.pending[0]
            if not self._take_blocks(part, reserve_blocks):
                break
            self.active.append(self.pending.popleft())
            items.append(self._piece(part, budget_tokens))
            budget_tokens -= items[-1].num_tokens
        return items

    def _piece(self, part: EmbedPart, budget_tokens: int) -> EmbedChunk:
        left = len(part.tokens) - part.num_computed
        return EmbedChunk(part, min(left, self.prefill_chunk_tokens, budget_tokens))

    def absorb(self, items: list[EmbedChunk], hidden: np.ndarray) -> None:
        """Add each chunk's final-normed hidden rows (hidden [sum of num_tokens, d], in
        `items` order) to its part; finish the parts whose last token was computed."""
        row = 0
        for item in items:
            part = item.part
            part.hidden_sum += hidden[row:row + item.num_tokens].sum(axis=0, dtype=np.float64)
            row += item.num_tokens
            part.num_computed += item.num_tokens
            if part.num_computed == len(part.tokens):
                self._finish_part(part)

    def _finish_part(self, part: EmbedPart) -> None:
        self.active.remove(part)
        self._release(part)
        pooled = part.hidden_sum / len(part.tokens)                            # [d]
        job = part.job
        job.vectors[part.index] = pooled / max(float(np.linalg.norm(pooled)), MIN_NORM)
        job.num_left -= 1
        if job.num_left == 0:
            self._complete(job)

    def _complete(self, job: EmbedJob) -> None:
        del self._jobs[job.id]
        self.finished.append(EmbedDone(job.id, job.vectors))

    def take_finished(self) -> list[EmbedDone]:
        done, self.finished = self.finished, []
        return done

    def cancel(self, job_id: int) -> None:
        """Drop a job: its parts leave the queue and release their blocks (unknown id: nothing)."""
        if self._jobs.pop(job_id, None) is None:
            return
        for part in [p for p in self.active if p.job.id == job_id]:
            self.active.remove(part)
            self._release(part)
        self.pending = deque(p for p in self.pending if p.job.id != job_id)

    def cancel_all(self) -> None:
        for job_id in list(self._jobs):
            self.cancel(job_id)
        self.finished = []
