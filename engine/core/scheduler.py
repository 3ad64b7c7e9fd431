"""The scheduler: who runs in this step, with how many tokens, and who must make room.

What it is: continuous batching. Every step the scheduler builds one batch under two
limits, `max_batched_tokens` (rows of the forward) and `max_num_seqs` (sequences), and
one latency policy: a step's time grows with its rows, and a decoding stream waits one
step per token, so while any running sequence decodes, the prefill rows of the step
(running prefills and new admissions; the engine adds embedding rows under the same
allowance while a token is awaited) stay within an allowance: as many rows as keep the
step within `itl_target_ms` by the step times measured so far (engine/core/step_cost.py),
and never fewer than `tokens_beside_decode` (so prompts always progress). Decode rows go
first and are never cut. With nobody decoding, steps keep that size too (a burst of prompts
then answers its first requests one step after another, not all at the end of one long
step), except that one prompt may always take a whole `prefill_chunk`.

1. running sequences, highest priority then earliest arrival first: a decoding one gets
   its one token (plus the drafts the speculation policy chooses for this batch size,
   engine/core/drafts/policy.py, within the budget), a prefilling one its next
   piece of at most `prefill_chunk` tokens -- so long prompts never stall the decodes;
2. if a running sequence needs a block and none is left (after evicting cached blocks),
   the lowest-priority, latest-arrived running sequence is *preempted by recompute*: its
   blocks are released (its full blocks stay in the prefix cache) and it goes back to
   the waiting queue with its output so far, to be prefilled again later;
3. if nobody was preempted, waiting sequences are admitted in the same order while there
   is budget, room in the batch and blocks: each first takes the longest cached prefix of
   its tokens from the radix tree (whole blocks shared, then the leading rows of a cached
   block it matches only in part copied: exact to the token), then allocates blocks for
   its first piece. A request
   whose prompt starts with whole blocks that a running sequence is still computing is
   passed over until they are computed, then takes them from the tree: requests that
   arrive together on a new shared prefix compute it once. Waiting costs a step, so it
   applies when the prefix in flight is at least `PREFIX_WAIT_MIN_TOKENS` long, or to a
   fork (`GenRequest.wait_for_prefix`: the other choices of an n > 1 request) always.

Waiting is not bounded here: the server's admission queue (server/worker/bridge.py) is the one
bound on queued requests. A request still waiting past its deadline is expired (`expire`). Order is strict: a waiting request that cannot
get blocks blocks the ones behind it, so a big high-priority prompt is not starved.

What it is not: the forward pass or sampling. The plan it returns says, per sequence,
how many tokens to compute and which drafts to verify.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Callable

from engine.types import EngineConfig
from engine.kv.blocks import BlockManager
from engine.core.sequence import Sequence
from engine.core.drafts.policy import Draft, DraftBatch
from engine.core.step_cost import StepCostModel

# A waiting request is passed over while a running sequence still computes at least this
# many prompt tokens it could share (whole blocks): waiting one step is then cheaper than
# computing them twice. A short common start (a chat template's first block) is not worth it.
PREFIX_WAIT_MIN_TOKENS = 64


@dataclass(frozen=True, slots=True)
class Scheduled:
    seq: Sequence
    num_tokens: int                     # tokens computed this step, from seq.num_computed on
    samples: bool                       # the chunk reaches the last known token: its last rows sample
    drafts: tuple[int, ...] = ()        # speculative tokens appended after the last token
    draft_source: str = ""              # the draft source that proposed them


@dataclass(frozen=True, slots=True)
class BlockCopy:
    """Copy K/V rows 0..num_tokens-1 of a cached block into a sequence's own new block (for
    every layer) before the step's forward: a prefix hit that ends inside a block."""
    src_block: int
    dst_block: int
    num_tokens: int


@dataclass(slots=True)
class StepPlan:
    scheduled: list[Scheduled] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    cannot_fit: list[Sequence] = field(default_factory=list)    # alone and still out of blocks
    copies: list[BlockCopy] = field(default_factory=list)       # run before the forward
    prefill_tokens: int = 0         # prompt rows in the step (not decode rows, not drafts)
    prefill_allowance: int = 0      # the latency policy's limit on them

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens + len(s.drafts) for s in self.scheduled)


class Scheduler:
    """Waiting queue + running set + the per-step batching decision."""

    def __init__(self, config: EngineConfig, blocks: BlockManager,
                 drafter: Callable[[Sequence, int, DraftBatch], Draft | None] | None = None):
        self.config = config
        self.blocks = blocks
        self.drafter = drafter
        self.waiting: list[Sequence] = []          # sorted by sort_key
        self.running: list[Sequence] = []
        self.preemptions_total = 0
        self.prefix_hit_tokens = 0
        self.prompt_tokens = 0
        self.prefix_waits_total = 0         # requests passed over for a prefix in flight
        self._draft_batch = DraftBatch(0)   # this step's drafting so far (the draft rule's batch)
        self.step_cost = StepCostModel()    # fed by the engine after every step

    # ----------------------------------------------------------------- queue

    def add(self, seq: Sequence) -> None:
        self._enqueue(seq)

    def _enqueue(self, seq: Sequence) -> None:
        keys = [s.sort_key for s in self.waiting]
        self.waiting.insert(bisect.bisect_right(keys, seq.sort_key), seq)

    def remove(self, seq: Sequence) -> None:
        """Take a sequence out (finished or aborted) and release its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.release(seq.blocks)
        seq.blocks = []

    def expire(self, now: float) -> list[Sequence]:
        """Remove and return never-scheduled waiting requests whose deadline has passed."""
        expired = [s for s in self.waiting if not s.was_scheduled
                   and s.req.deadline_s is not None and now > s.req.deadline_s]
        for seq in expired:
            self.waiting.remove(seq)
        return expired

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ----------------------------------------------------------------- the step

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self.config.max_batched_tokens
        decoding = self._num_decoding()
        prefill_room = plan.prefill_allowance = self._allowance(decoding)
        self._draft_batch = DraftBatch(decoding)
        self.running.sort(key=lambda s: s.sort_key)
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            prefilling = seq.num_uncomputed > 1
            if prefilling and prefill_room <= 0:
                index += 1                 # its next piece waits for a step with room
                continue
            limit = min(budget, prefill_room) if prefilling else budget
            item = self._schedule_running(seq, limit, plan)
            if item is None:               # seq itself was preempted or cannot fit
                continue
            plan.scheduled.append(item)
            budget -= item.num_tokens + len(item.drafts)
            if prefilling:
                prefill_room -= item.num_tokens
                plan.prefill_tokens += item.num_tokens
            index += 1
        if not plan.preempted:
            plan.prefill_tokens += self._admit(plan, min(budget, prefill_room))
        return plan

    def prefill_allowance(self) -> int:
        """Prefill tokens this step may hold. While running sequences decode (their next
        token waits on this step): what keeps the step within `itl_target_ms` beside
        their rows by the learned step cost, at least `tokens_beside_decode`; else the
        same for no decoding rows, but at least one `prefill_chunk`."""
        return self._allowance(self._num_decoding())

    def _num_decoding(self) -> int:
        return sum(seq.num_uncomputed == 1 for seq in self.running)

    def _allowance(self, decoding: int) -> int:
        if decoding:
            return self.latency_allowance(decoding)
        # Nobody waits for a token: one prompt may take a whole chunk, and several share
        # steps of the latency policy's size, so the first of a burst answer one step
        # after another rather than all at the end of one long step.
        return min(self.config.max_batched_tokens,
                   max(self.config.prefill_chunk, self.latency_allowance(0)))

    def latency_allowance(self, awaited_rows: int) -> int:
        """Other rows a step may add beside `awaited_rows` rows whose token is awaited."""
        cfg = self.config
        floor = min(cfg.tokens_beside_decode, cfg.max_batched_tokens)
        rows = self.step_cost.rows_within(cfg.itl_target_ms / 1000) if cfg.itl_target_ms else None
        if rows is None:
            return floor
        return max(floor, min(cfg.max_batched_tokens, rows - awaited_rows))

    def _schedule_running(self, seq: Sequence, budget: int, plan: StepPlan) -> Scheduled | None:
        remaining = seq.num_uncomputed
        draft = None
        if remaining == 1 and self.drafter is not None and budget > 1:
            draft = self.drafter(seq, budget - 1, self._draft_batch)
        want = min(remaining, self.config.prefill_chunk, budget)
        while True:
            drafts = draft.tokens if draft is not None else ()
            if self.blocks.grow(seq.blocks, seq.num_computed + want + len(drafts)):
                return Scheduled(seq, want, want == remaining, drafts, draft.source if draft else "")
            if draft is not None:          # try again without the speculation first
                self._draft_batch.give_back(draft)
                draft = None
                continue
            victim = self.running[-1]
            if victim is seq and len(self.running) == 1:
                self.running.remove(seq)
                plan.cannot_fit.append(seq)
                return None
            self._preempt(victim, plan)
            if victim is seq:
                return None

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        self.running.remove(seq)
        self.blocks.release(seq.blocks)
        seq.reset_for_recompute()
        self._enqueue(seq)
        plan.preempted.append(seq)
        self.preemptions_total += 1

    def _admit(self, plan: StepPlan, budget: int) -> int:
        """Admit waiting sequences in order within `budget` tokens; returns the tokens used."""
        start_budget, index = budget, 0
        while index < len(self.waiting) and budget > 0 and \
                len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[index]
            if self._waits_for_prefix(seq):
                index += 1                 # it waits; the requests behind it go on
                continue
            copy = self._take_cached_prefix(seq)
            want = min(seq.num_uncomputed, self.config.prefill_chunk, budget)
            if not self.blocks.grow(seq.blocks, seq.num_computed + want):
                self.blocks.release(seq.blocks)
                seq.reset_for_recompute()
                break
            if copy is not None:
                plan.copies.append(copy)
            self.waiting.pop(index)
            if not seq.was_scheduled:
                seq.was_scheduled = True
                self.prompt_tokens += seq.num_prompt
                self.prefix_hit_tokens += seq.num_computed
            self.running.append(seq)
            plan.scheduled.append(Scheduled(seq, want, want == seq.num_uncomputed))
            budget -= want
        return start_budget - budget

    def _waits_for_prefix(self, seq: Sequence) -> bool:
        """Should `seq` wait for a prefix a running sequence is computing? (counted once)"""
        in_flight = self._prefix_in_flight_tokens(seq)
        waits = in_flight > 0 if seq.req.wait_for_prefix else in_flight >= PREFIX_WAIT_MIN_TOKENS
        if waits and not seq.waited_for_prefix:
            seq.waited_for_prefix = True
            self.prefix_waits_total += 1
        return waits

    def _prefix_in_flight_tokens(self, seq: Sequence) -> int:
        """Tokens of whole blocks `seq` shares with a running sequence that has not computed
        them yet (the largest over the running sequences; 0: nothing to wait for)."""
        bs = self.blocks.block_size
        whole = (len(seq.tokens) - 1) // bs * bs          # tokens in shareable whole blocks
        best = 0
        for other in self.running:
            common = 0
            while common < whole and \
                    other.tokens[common:common + bs] == seq.tokens[common:common + bs]:
                common += bs
            best = max(best, common - other.num_computed)
        return best

    def _take_cached_prefix(self, seq: Sequence) -> BlockCopy | None:
        """Start from the longest cached prefix; at least one token is always computed.

        Whole blocks are shared from the tree; where the prompt then leaves the cached path
        inside a block (a question after a system prompt whose last block is partly its
        own), the matching leading rows of that cached block are copied into a fresh block
        of this sequence, so the hit is exact to the token. Returns that copy, if any."""
        if seq.scores_prompt:              # prompt scoring needs every position's logits
            self._share_blocks(seq, 0)
            return None
        node = self._share_blocks(seq, (len(seq.tokens) - 1) // self.blocks.block_size)
        done = seq.num_computed
        src, common = self.blocks.match_partial(node, seq.tokens[done:len(seq.tokens) - 1])
        if common == 0:
            return None
        fresh = self.blocks.allocate(1)
        if fresh is None:
            return None
        seq.blocks.append(fresh[0])
        seq.num_computed = done + common
        return BlockCopy(src, fresh[0], common)

    def _share_blocks(self, seq: Sequence, max_blocks: int):
        """Take the longest cached run of whole blocks; returns its tree node."""
        blocks, node = self.blocks.match_prefix(seq.tokens, max_blocks)
        seq.blocks = blocks
        seq.radix_node = node
        seq.num_committed_blocks = len(blocks)
        seq.num_computed = len(blocks) * self.blocks.block_size
        return node
