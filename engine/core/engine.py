"""The Engine: continuous batching over a paged KV cache, one `step()` at a time.

What it is: the single-threaded heart of the server. `add_request` hands a `GenRequest`
to the scheduler and returns its id; every `step()` is the same three moves (nano-vllm's
shape):

    schedule     the scheduler (engine/core/scheduler.py), which owns the live sequences,
                 finishes the ones waiting past their deadline (-> "deadline") and plans
                 which sequences run, with how many tokens and drafts
    run          ONE batched forward over all their rows (engine/core/runner.py), with
                 embedding inputs as prefill-only rows in what is left of the token budget
                 (engine/core/embedding.py; `add_embedding` / `take_embeddings`); the
                 step's logits wait in a `StepLogits` (engine/core/step_logits.py)
    postprocess  the scheduler again: per sequence, full blocks into the prefix cache,
                 one token per sampling row with the request's own seeded stream,
                 speculative rows verified in order (the speculation policy learns from
                 them, engine/core/drafts/), and the finish decision: EOS or a stop id
                 -> "stop", `max_tokens` or the context limit -> "length"; a finished
                 sequence releases its blocks

and returns one `TokenOut` per produced token or finish. `abort(id)` releases a
request's blocks at once.

Determinism: a request's i-th sample uses `(seed, i)` only, so batch mates, chunked
prefill, preemption and speculation never change a seeded result. Time (`clock`) and
the seed source for requests without a seed (`rng`) are injected.

What it is not: threads, text, HTTP. The server puts the engine on its own thread.
"""
from __future__ import annotations

import random
import time
from typing import Callable

import numpy as np

from engine.errors import InvalidRequest, PromptTooLong
from engine.types import (EngineConfig, EngineStats, GenRequest, KvSize, PromptLogprobs,
                          RequestId, TokenOut)
from engine.kv.blocks import BlockManager
from engine.kv.pools import KVCache
from engine.kv.window import WindowPool, pool_sizes
from engine.model.lora import LoraAdapter
from engine.model.spec import Model
from engine.core.chunk import Chunk
from engine.core.runner import ModelRunner
from engine.core.plan import Scheduled, StepPlan
from engine.core.scheduler import Scheduler
from engine.core.embedding import EmbedDone, EmbeddingQueue, embed_budget_tokens
from engine.core.sequence import Sequence
from engine.core.snapshot import EngineSnapshot, StepRecord, build_snapshot, step_record
from engine.core import speculative
from engine.core.drafts.policy import DraftPolicy
from engine.core.step_logits import StepLogits
from engine.grammar.constraint import Guides

SEED_BITS = 63


def check_context(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> int:
    """The context rule, in one place: the prompt plus at least one completion token (or
    `max_tokens` of them) must fit in `max_model_len`. Returns the completion budget
    (`max_tokens`, or the room left when it is None); raises `PromptTooLong` with the numbers.

    Pure, so the server can apply it on its own thread before a request is queued; the
    engine applies it again in `add_request` (with one token) for its direct callers."""
    budget_tokens = max_model_len - prompt_tokens if max_tokens is None else max_tokens
    completion_tokens = max(budget_tokens, 1)
    if prompt_tokens + completion_tokens > max_model_len:
        raise PromptTooLong(
            f"{prompt_tokens} prompt tokens + {completion_tokens} completion tokens exceed "
            f"the context of {max_model_len}", prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens, max_model_len=max_model_len)
    return budget_tokens


class Engine:
    def __init__(self, model: Model, config: EngineConfig = EngineConfig(), *,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None):
        self.model = model
        self.config = config
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        mc = model.config
        self._max_model_len = min(config.max_model_len or mc.max_position_embeddings,
                                  mc.max_position_embeddings)
        # Sliding-window layers get a window pool of their own (engine/kv/window.py).
        num_blocks, num_window_blocks = pool_sizes(mc, config)
        self.kv = KVCache(mc, num_blocks, config.block_size, num_window_blocks)
        window = None if num_window_blocks is None else \
            WindowPool(num_window_blocks, config.block_size, mc.options.sliding_window)
        self.blocks = BlockManager(num_blocks, config.block_size, config.prefix_cache, window)
        # The decode mirror may hold at most as many bytes as the pools (see engine/kv/mirror.py).
        self.runner = ModelRunner(mc, model.weights, self.kv, self._max_model_len,
                                  mirror_bytes=self.kv.nbytes, lora_merge=config.lora_merge)
        self.drafts: DraftPolicy | None = None             # speculation off
        if config.speculative is not None:
            speculative.check_config(config.speculative)
            self.drafts = DraftPolicy(config.speculative, self._max_model_len)
        self.scheduler = Scheduler(config, self.blocks, self._max_model_len, drafts=self.drafts,
                                   clock=clock)            # owns the live sequences
        self.eos_ids = frozenset(int(t) for t in mc.eos_token_ids)
        self.embeddings = EmbeddingQueue(self.blocks, mc.hidden_size, config.prefill_chunk,
                                         self._max_model_len)   # embeddings: engine/core/embedding.py
        self.guides = Guides(model.tokenizer, mc.vocab_size, self.eos_ids)      # grammars' run time
        self._next_id = 0
        self._last_batch_tokens = 0
        self._steps_total = 0
        self.record_steps = False          # True: each step leaves a StepRecord in last_step
        self.last_step: StepRecord | None = None

    # ----------------------------------------------------------------- requests

    def add_request(self, req: GenRequest) -> RequestId:
        """Queue a request; `RequestRefused` (InvalidRequest, PromptTooLong) if it cannot run."""
        if not req.prompt:
            raise InvalidRequest("a request needs at least one prompt token")
        check_context(len(req.prompt), 1, self._max_model_len)
        if self.blocks.blocks_for_tokens(len(req.prompt) + 1) > self.blocks.num_blocks:
            raise PromptTooLong("prompt does not fit in the KV cache")
        seed = req.seed if req.seed is not None else self.rng.getrandbits(SEED_BITS)
        seq = Sequence(self._next_id, req, seed=seed, arrival=self._next_id, eos_ids=self.eos_ids)
        if req.grammar is not None:
            seq.constraint = self.guides.constraint(req.grammar)
        self.scheduler.add(seq)
        self._next_id += 1
        return seq.id

    def abort(self, request_id: RequestId) -> None:
        """Drop a request and free its blocks now (unknown or finished id: nothing)."""
        self.scheduler.abort(request_id)

    def forget_adapter(self, adapter: LoraAdapter) -> None:
        """The adapter was unloaded: its merged weights, if held, are freed now, and it is
        never merged again (its requests in flight finish on the grouped path)."""
        self.runner.merges.forget(adapter)

    def abort_all(self) -> None:
        self.scheduler.abort_all()
        self.embeddings.cancel_all()

    def has_work(self) -> bool:
        return self.scheduler.has_work() or self.embeddings.has_work()

    def max_model_len(self) -> int:
        return self._max_model_len

    def kv_size(self) -> KvSize:
        return KvSize(num_blocks=self.kv.num_blocks, block_size_tokens=self.config.block_size,
                      nbytes=self.kv.nbytes)

    # ----------------------------------------------------------------- the step

    def step(self) -> list[TokenOut | PromptLogprobs]:
        """Schedule, run one batched forward, postprocess: one TokenOut per produced token or
        finish (and a PromptLogprobs per prefill chunk of a request that scores its prompt)."""
        if self.record_steps:
            self.last_step, start_s = None, self.clock()    # None: a step without a batch
        plan = self.scheduler.schedule()
        embeds = self._embedding_rows(plan) if self.embeddings.has_work() else []
        self._last_batch_tokens = plan.num_tokens + sum(e.num_tokens for e in embeds)
        if not plan.scheduled and not embeds:
            return self.scheduler.postprocess(plan, None)   # only finishes: nothing to run
        self._steps_total += 1
        scheduled_s = self.clock()
        logits = self._run(plan, embeds)
        forward_s = self.clock() if self.record_steps else 0.0
        outs = self.scheduler.postprocess(plan, logits)
        step_s = self.clock() - scheduled_s
        self.scheduler.step_cost.observe(self._last_batch_tokens, step_s)
        if self.drafts is not None and not plan.prefill_tokens and not embeds:
            self.drafts.observe_step(plan.num_tokens, step_s)             # decode and draft rows only
        if self.record_steps:
            times_s = (start_s, scheduled_s, forward_s, self.clock())
            self.last_step = step_record(self._steps_total, times_s, plan, plan.accepted)
        return outs

    def _run(self, plan: StepPlan, embeds: list) -> StepLogits:
        """The plan's prefix copies, then ONE forward over its chunks with the embedding
        pieces' rows after them; the embeddings take their hidden states [E, d]."""
        for copy in plan.copies:                         # prefix hits that end inside a block
            self.kv.copy_rows(copy.src_block, copy.dst_block, copy.num_tokens,
                              copy.window_src, copy.window_dst)
        chunks = [self._chunk(item) for item in plan.scheduled]
        num_rows = sum(len(c.tokens) for c in chunks)
        chunks += [e.chunk() for e in embeds]                                  # rows after the rest
        embed_rows = np.arange(num_rows, num_rows + self._last_batch_tokens - plan.num_tokens)
        logits, hidden = self.runner.forward_with_hidden(chunks, embed_rows)  # [R, V], [E, d]
        self.embeddings.absorb(embeds, hidden)
        return StepLogits.of(logits)

    def _embedding_rows(self, plan: StepPlan) -> list:
        """Embedding pieces for this step, within the latency policy's room while a token
        is awaited (engine/core/embedding.py: `embed_budget_tokens`)."""
        sampling_rows = sum(1 + len(item.drafts) for item in plan.scheduled if item.samples)
        budget = embed_budget_tokens(self.config.max_batched_tokens - plan.num_tokens,
                                     self.scheduler.latency_allowance(sampling_rows) - plan.prefill_tokens,
                                     is_sampling=sampling_rows > 0)
        return self.embeddings.schedule(budget, reserve_blocks=len(self.scheduler.running))

    @staticmethod
    def _chunk(item: Scheduled) -> Chunk:
        seq = item.seq
        start = seq.num_computed
        tokens = tuple(seq.tokens[start:start + item.num_tokens]) + item.drafts
        window_table = tuple(seq.window_blocks) if seq.window_blocks else None
        return Chunk(tokens, start, tuple(seq.blocks), item.num_logits, seq.id,
                     seq.req.scope.adapter, window_table=window_table)

    # ----------------------------------------------------------------- side doors

    def add_embedding(self, inputs) -> int:
        """Queue an embeddings job (token-id lists); later steps pack its inputs as
        prefill-only rows and `take_embeddings` returns its vectors [n, d]."""
        return self.embeddings.add(inputs)

    def take_embeddings(self) -> list[EmbedDone]:
        return self.embeddings.take_finished()

    def cancel_embedding(self, job_id: int) -> None:
        self.embeddings.cancel(job_id)

    def snapshot(self) -> EngineSnapshot:
        """The KV pool, running and waiting sequences and radix tree, in ids and counts."""
        return build_snapshot(self.scheduler.running, self.scheduler.waiting, self.blocks)

    def stats(self) -> EngineStats:
        sch, blocks, merges = self.scheduler, self.blocks, self.runner.merges
        by_source = self.drafts.by_source() if self.drafts is not None else ()
        return EngineStats(
            kv_blocks_used=blocks.num_used_blocks,
            kv_blocks_cached=blocks.num_cached_blocks,
            kv_blocks_free=blocks.num_free_blocks,
            queue_depth=len(sch.waiting),
            active_sequences=len(sch.running),
            batch_tokens=self._last_batch_tokens,
            prefix_hit_ratio=sch.prefix_hit_tokens / sch.prompt_tokens if sch.prompt_tokens else 0.0,
            prefix_hit_tokens=sch.prefix_hit_tokens,
            prompt_tokens=sch.prompt_tokens,
            preemptions_total=sch.preemptions_total,
            prefix_waits_total=sch.prefix_waits_total,
            evictions_total=blocks.evictions_total,
            spec_draft_tokens=sum(drafted for _, drafted, _ in by_source),
            spec_accepted_tokens=sum(accepted for _, _, accepted in by_source),
            spec_by_source=by_source,
            steps_total=self._steps_total,
            running_adapters=_adapter_names(sch.running),
            waiting_adapters=_adapter_names(sch.waiting),
            max_loras=self.config.max_loras,
            lora_merged_adapter=merges.merged_adapter, lora_merged_bytes=merges.merged_bytes,
            lora_merged_steps_total=merges.merged_steps_total,
            lora_grouped_steps_total=merges.grouped_steps_total,
            lora_merges_built_total=merges.merges_built_total,
        )


def _adapter_names(seqs: list[Sequence]) -> tuple[str, ...]:
    """The LoRA adapters `seqs` run on, by name, sorted (the base is none of them)."""
    return tuple(sorted({s.req.scope.adapter.name for s in seqs if s.req.scope.adapter is not None}))
