"""The Engine: continuous batching over a paged KV cache, one `step()` at a time.

What it is: the single-threaded heart of the server. `add_request` queues a `GenRequest`
and returns its id; every `step()` is the same checklist (nano-vllm's shape):

    expire   waiting requests past their deadline -> TokenOut(token=None, "deadline")
    schedule which sequences run, with how many tokens (engine/core/scheduler.py)
    run      ONE batched forward over all their rows (engine/core/runner.py), with
             embedding inputs as prefill-only rows in what is left of the token budget
             (engine/core/embedding.py; `add_embedding` / `take_embeddings`)
    sample   one token per sampling row with the request's own seeded stream
             (engine/core/sampler.py); speculative rows are verified in order, and the
             speculation policy learns from them (engine/core/drafts/)
    commit   full blocks into the prefix cache; finished sequences release their blocks

and returns one `TokenOut` per produced token. A token in the model's EOS ids (unless
`ignore_eos`) or in the request's `stop_ids` finishes it with "stop" (and is reported);
`max_tokens`, or the context limit, with "length". `abort(id)` releases a request's
blocks at once.

Determinism: a request's i-th sample uses `(seed, i)` only, so batch mates, chunked
prefill, preemption and speculation never change a seeded result. Time (`clock`) and
the seed source for requests without a seed (`rng`) are injected.

What it is not: threads, text, HTTP. The server puts the engine on its own thread.
"""
from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Callable

import numpy as np

from engine.model import llama
from engine.core import sampler
from engine.errors import InvalidRequest, PromptTooLong
from engine.types import (FINISH_DEADLINE, FINISH_LENGTH, FINISH_STOP, EngineConfig,
                          EngineStats, GenRequest, KvSize, PromptLogprobs, RequestId, TokenOut)
from engine.kv.blocks import BlockManager
from engine.kv.pools import KVCache, num_blocks_for_budget
from engine.model.spec import Model
from engine.core.chunk import Chunk
from engine.core.runner import ModelRunner
from engine.core.scheduler import Scheduled, Scheduler, StepPlan
from engine.core.embedding import EmbedDone, EmbeddingQueue, embed_budget_tokens
from engine.core.sequence import Sequence
from engine.core.snapshot import EngineSnapshot, StepRecord, build_snapshot, step_record
from engine.core import prompt_scores, speculative
from engine.core.drafts.policy import Draft, DraftPolicy, prediction_counts
from engine.core.guided import sample_guided
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
        num_blocks = config.num_kv_blocks or num_blocks_for_budget(mc, config.block_size, config.kv_cache_mib)
        self.kv = KVCache(mc, num_blocks, config.block_size)
        self.blocks = BlockManager(num_blocks, config.block_size, config.prefix_cache)
        # The decode mirror may hold at most as many bytes as the pools (see engine/kv/mirror.py).
        self.runner = ModelRunner(mc, model.weights, self.kv, self._max_model_len,
                                  mirror_bytes=self.kv.nbytes)
        self.scheduler = Scheduler(config, self.blocks)
        self.drafts: DraftPolicy | None = None             # speculation off
        if config.speculative is not None:
            speculative.check_config(config.speculative)
            self.drafts = DraftPolicy(config.speculative, self._max_model_len)
            self.scheduler.drafter = self.drafts.propose
        self.eos_ids = frozenset(int(t) for t in mc.eos_token_ids)
        self.embeddings = EmbeddingQueue(self.blocks, mc.hidden_size, config.prefill_chunk,
                                         self._max_model_len)   # embeddings: engine/core/embedding.py
        self.guides = Guides(model.tokenizer, mc.vocab_size, self.eos_ids)      # grammars' run time
        self._seqs: dict[RequestId, Sequence] = {}
        self._next_id = 0
        self._last_batch_tokens = 0
        self._steps_total = 0
        self._step_accepted: dict[RequestId, int] = {}     # this step's accepted drafts (step records)
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
        self._seqs[seq.id] = seq
        self._next_id += 1
        return seq.id

    def abort(self, request_id: RequestId) -> None:
        """Drop a request and free its blocks now (unknown or finished id: nothing)."""
        seq = self._seqs.pop(request_id, None)
        if seq is not None:
            self._finish(seq)

    def abort_all(self) -> None:
        for request_id in list(self._seqs):
            self.abort(request_id)
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
        """Expire, schedule, run one batched forward, sample; one TokenOut per produced token
        (and a PromptLogprobs per prefill chunk of a request that scores its prompt)."""
        if self.record_steps:
            self.last_step, start_s = None, self.clock()    # None: a step without a batch
            self._step_accepted = {}
        outs = [TokenOut(id=s.id, token=None, finish=FINISH_DEADLINE)
                for s in self.scheduler.expire(self.clock())]
        for out in outs:
            self._seqs.pop(out.id)
        plan = self.scheduler.schedule()
        for copy in plan.copies:                         # prefix hits that end inside a block
            self.kv.copy_rows(copy.src_block, copy.dst_block, copy.num_tokens)
        for seq in plan.cannot_fit:
            outs.append(self._with_prediction_counts(seq, TokenOut(id=seq.id, token=None, finish=FINISH_LENGTH)))
            self._seqs.pop(seq.id, None)
            self._finish(seq)
        embeds = self._embedding_rows(plan) if self.embeddings.has_work() else []
        self._last_batch_tokens = plan.num_tokens + sum(e.num_tokens for e in embeds)
        if not plan.scheduled and not embeds:
            return outs
        self._steps_total += 1
        scheduled_s = self.clock()
        chunks = [self._chunk(item) for item in plan.scheduled]
        num_rows = sum(len(c.tokens) for c in chunks)
        chunks += [e.chunk() for e in embeds]                                  # rows after the rest
        embed_rows = np.arange(num_rows, num_rows + self._last_batch_tokens - plan.num_tokens)
        logits, hidden = self.runner.forward_with_hidden(chunks, embed_rows)  # [R, V], [E, d]
        self.embeddings.absorb(embeds, hidden)
        forward_s = self.clock() if self.record_steps else 0.0
        argmax = sampler.greedy_tokens(logits)                                 # [R], for plain-greedy rows
        row = 0
        for item, chunk in zip(plan.scheduled, chunks):
            end = row + chunk.num_logits
            outs.extend(self._postprocess(item, logits[row:end], argmax[row:end]))
            row = end
        step_s = self.clock() - scheduled_s
        self.scheduler.step_cost.observe(self._last_batch_tokens, step_s)
        if self.drafts is not None and not plan.prefill_tokens and not embeds:
            self.drafts.observe_step(plan.num_tokens, step_s)             # decode and draft rows only
        if self.record_steps:
            times_s = (start_s, scheduled_s, forward_s, self.clock())
            self.last_step = step_record(self._steps_total, times_s, plan, self._step_accepted)
        return outs

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
        num_logits = (1 + len(item.drafts)) if item.samples else 0
        if seq.scores_prompt and start < seq.num_prompt:
            num_logits = len(tokens)                     # every row: prompt scoring
        return Chunk(tokens, start, tuple(seq.blocks), num_logits, seq.id)

    def _postprocess(self, item: Scheduled, logits: np.ndarray, argmax: np.ndarray) -> list:
        seq = item.seq
        start = seq.num_computed
        seq.num_computed += item.num_tokens
        self._commit_full_blocks(seq)                    # before sampling may finish it
        outs: list = []
        if seq.scores_prompt and start < seq.num_prompt:
            scores = prompt_scores.score_chunk(seq, start, logits[:item.num_tokens])
            outs += [scores] if scores is not None else []
            logits, argmax = logits[-1:], argmax[-1:]    # the sampling row, if any
        if not item.samples:
            return outs
        if seq.req.max_tokens == 0:                      # scoring only: nothing is sampled
            self._seqs.pop(seq.id, None)
            self._finish(seq)
            return outs + [TokenOut(id=seq.id, token=None, finish=FINISH_LENGTH)]
        accepted, mismatched = 0, False
        for j in range(logits.shape[0]):
            out = self._sample(seq, logits[j], int(argmax[j]))
            outs.append(out)
            if j < len(item.drafts):
                if out.token != item.drafts[j]:
                    mismatched = True
                    break
                accepted += 1
                if out.finish is None:
                    seq.num_computed += 1                # the draft's K/V is now valid
            if out.finish is not None:
                break
        if item.drafts:
            self.drafts.settle(seq, Draft(item.draft_source, item.drafts), accepted, mismatched)
            if self.record_steps:
                self._step_accepted[seq.id] = accepted
            if outs[-1].finish is None:
                self._commit_full_blocks(seq)            # blocks filled by accepted drafts
        if outs[-1].finish is not None or seq.req.prediction:
            outs[-1] = self._with_prediction_counts(seq, outs[-1])
        return outs

    @staticmethod
    def _with_prediction_counts(seq: Sequence, out: TokenOut) -> TokenOut:
        """The step's last TokenOut of a request with a prediction, and every finishing one,
        carry its prediction counts so far (0, 0 without one): a server that ends the request
        itself (a stop string) has them without the engine's finish."""
        accepted, rejected = prediction_counts(seq)
        if not (accepted or rejected):
            return out
        return replace(out, accepted_prediction_tokens=accepted, rejected_prediction_tokens=rejected)

    def _sample(self, seq: Sequence, logits_row: np.ndarray, argmax: int) -> TokenOut:
        """Sample one token; `argmax` is the row's raw argmax, the answer for plain greedy."""
        params = seq.req.params
        suppress = seq.suppress_ids()
        guide = seq.constraint
        if sampler.is_plain_greedy(params, suppress) and (guide is None or guide.allows(argmax)):
            result = sampler.greedy_result(argmax)
        elif guide is not None:
            result = sample_guided(logits_row, params, guide, seed=seq.seed, sample_index=seq.num_generated,
                                   output_counts=seq.output_counts, prompt_tokens=seq.prompt_set,
                                   suppress_ids=suppress)
        else:
            prompt_set = seq.prompt_set if params.repetition_penalty != 1.0 else frozenset()
            result = sampler.sample(logits_row, params, seed=seq.seed, sample_index=seq.num_generated,
                                    output_counts=seq.output_counts, prompt_tokens=prompt_set,
                                    suppress_ids=suppress)
        token = result.token
        seq.append(token)
        finish = None
        if token in seq.eos_ids or token in seq.stop_ids or (guide is not None and guide.finished):
            finish = FINISH_STOP
        elif seq.num_generated >= seq.req.max_tokens or len(seq.tokens) >= self._max_model_len:
            finish = FINISH_LENGTH
        if finish is not None:
            self._seqs.pop(seq.id, None)
            self._finish(seq)
        return TokenOut(id=seq.id, token=token, logprob=result.logprob,
                        top_logprobs=result.top_logprobs, finish=finish)

    def _finish(self, seq: Sequence) -> None:
        self.scheduler.remove(seq)
        if self.drafts is not None:
            self.drafts.finish(seq)                      # its text joins the suffix store

    def _commit_full_blocks(self, seq: Sequence) -> None:
        """Offer newly filled blocks of computed tokens to the prefix cache."""
        bs = self.blocks.block_size
        full = seq.num_computed // bs
        while seq.radix_node is not None and seq.num_committed_blocks < full:
            i = seq.num_committed_blocks
            key = tuple(seq.tokens[i * bs:(i + 1) * bs])
            node = self.blocks.commit(seq.radix_node, key, seq.blocks[i])
            if node is not None:
                seq.blocks[i] = node.block           # the tree's copy, when it already had one
            seq.radix_node = node
            seq.num_committed_blocks += 1

    # ----------------------------------------------------------------- side doors

    def add_embedding(self, inputs) -> int:
        """Queue an embeddings job (token-id lists); later steps pack its inputs as
        prefill-only rows and `take_embeddings` returns its vectors [n, d]."""
        return self.embeddings.add(inputs)

    def take_embeddings(self) -> list[EmbedDone]:
        return self.embeddings.take_finished()

    def cancel_embedding(self, job_id: int) -> None:
        self.embeddings.cancel(job_id)

    def embed(self, inputs) -> np.ndarray:
        """Mean-pooled, L2-normalised final hidden states: one dense forward per input -> [n, d].
        The reference for direct callers without a step loop; the server uses `add_embedding`."""
        mc, w = self.model.config, self.model.weights
        out = np.empty((len(inputs), mc.hidden_size), dtype=np.float32)
        for i, ids in enumerate(inputs):
            if len(ids) == 0:
                raise InvalidRequest("an embedding input needs at least one token")
            pooled = llama.hidden_states(mc, w, list(ids)).mean(axis=0)         # [T, d] -> [d]
            out[i] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return out

    def snapshot(self) -> EngineSnapshot:
        """The KV pool, running and waiting sequences and radix tree, in ids and counts."""
        return build_snapshot(self.scheduler.running, self.scheduler.waiting, self.blocks)

    def stats(self) -> EngineStats:
        sch, blocks = self.scheduler, self.blocks
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
        )
