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
   With sliding-window layers each sequence also holds a window table (engine/kv/window.py):
   grown with its block table, and after every step its entries behind the window are
   released, so the sliding layers' blocks a sequence holds stay about one window's worth;
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
   Only a request's own cache scope is matched (`GenRequest.scope`: its LoRA adapter and
   tenant salt), and one whose adapter would make the running set hold more than
   `max_loras` adapters is passed over until one of them ends (vLLM's rule).

Waiting is not bounded here: the server's admission queue (server/worker/bridge.py) is the one
bound on queued requests. Order is strict: a waiting request that cannot get blocks blocks
the ones behind it, so a big high-priority prompt is not starved.

The plan (engine/core/plan.py) says, per sequence, how many tokens to compute and which
drafts to verify. The scheduler holds the engine's only table of live sequences and decides
when each ends: while planning, one that waited past its deadline ("deadline", on the
injected clock) or is alone and out of blocks ("length"); in `postprocess`, after the
forward, by the tokens its logit rows give (sampled by engine/core/step_logits.py): EOS or
a stop id -> "stop", `max_tokens` or the context limit -> "length". `postprocess` also
verifies drafts (engine/core/speculative.py) and offers full blocks to the prefix cache. A
finished sequence releases its blocks at once; its text joins the speculation policy's store.

What it is not: the forward pass or sampling.

Size: one concept, the step's batching decision and its consequences for the sequences'
blocks (both tables, the prefix cache, preemption, the adapters a step may hold);
splitting planning from `postprocess` would split the one table of live sequences the two
share.
"""
from __future__ import annotations

import bisect
from typing import Callable

from engine.types import (FINISH_DEADLINE, FINISH_LENGTH, FINISH_STOP, EngineConfig,
                          PromptLogprobs, RequestId, TokenOut)
from engine.kv.blocks import BlockManager
from engine.core import prompt_scores
from engine.core.sequence import Sequence
from engine.core.drafts.policy import Draft, DraftBatch, DraftPolicy, with_prediction_counts
from engine.core.plan import BlockCopy, Scheduled, StepPlan
from engine.core.step_cost import StepCostModel
from engine.core.step_logits import StepLogits

# A waiting request is passed over while a running sequence still computes at least this
# many prompt tokens it could share (whole blocks): waiting one step is then cheaper than
# computing them twice. A short common start (a chat template's first block) is not worth it.
PREFIX_WAIT_MIN_TOKENS = 64


class Scheduler:
    """The live sequences (waiting queue + running set, the engine's one table of them), the
    per-step batching decision, and what each step's tokens mean for them (`postprocess`)."""

    def __init__(self, config: EngineConfig, blocks: BlockManager, max_model_len: int, *,
                 drafts: DraftPolicy | None = None, clock: Callable[[], float]):
        self.config = config
        self.blocks = blocks
        self.max_model_len = max_model_len
        self.drafts = drafts                       # the speculation policy (None: speculation off)
        self.clock = clock                         # deadlines are on this clock
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

    def abort(self, request_id: RequestId) -> None:
        """End a live request now and free its blocks (unknown or finished id: nothing)."""
        for seq in self.running + self.waiting:
            if seq.id == request_id:
                self._finish(seq)
                return

    def abort_all(self) -> None:
        for seq in sorted(self.running + self.waiting, key=lambda s: s.id):   # in arrival order
            self._finish(seq)

    def _finish(self, seq: Sequence) -> None:
        """Take a sequence out (finished or aborted) and release its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self._release(seq)
        seq.blocks, seq.window_blocks = [], []
        if self.drafts is not None:
            self.drafts.finish(seq)                # its text joins the suffix store

    def _expire(self) -> list[Sequence]:
        """Take out and return never-scheduled waiting requests whose deadline has passed."""
        now_s = self.clock()
        expired = [s for s in self.waiting if not s.was_scheduled
                   and s.req.deadline_s is not None and now_s > s.req.deadline_s]
        for seq in expired:
            self.waiting.remove(seq)
        return expired

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ----------------------------------------------------------------- the step

    def schedule(self) -> StepPlan:
        """This step's plan: deadlines expired first, then the running sequences' rows, then
        admissions (see the module docstring). Who stops here is finished at once."""
        plan = StepPlan(expired=self._expire())
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
        for seq in plan.cannot_fit:        # after every draft was chosen: the store as it was
            self._finish(seq)
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
        if remaining == 1 and self.drafts is not None and budget > 1:
            draft = self.drafts.propose(seq, budget - 1, self._draft_batch)
        want = min(remaining, self.config.prefill_chunk, budget)
        while True:
            drafts = draft.tokens if draft is not None else ()
            if self._grow(seq, seq.num_computed + want + len(drafts)):
                return Scheduled.of(seq, want, want == remaining, drafts, draft.source if draft else "")
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
        self._release(seq)
        seq.reset_for_recompute()
        self._enqueue(seq)
        plan.preempted.append(seq)
        self.preemptions_total += 1

    def _admit(self, plan: StepPlan, budget: int) -> int:
        """Admit waiting sequences in order within `budget` tokens; returns the tokens used."""
        start_budget, index = budget, 0
        adapters = {s.req.scope.adapter for s in self.running} - {None}
        while index < len(self.waiting) and budget > 0 and \
                len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[index]
            adapter = seq.req.scope.adapter
            if adapter is not None and adapter not in adapters and \
                    len(adapters) >= self.config.max_loras:
                index += 1                 # its adapter would exceed max_loras: a later step
                continue
            if self._waits_for_prefix(seq):
                index += 1                 # it waits; the requests behind it go on
                continue
            copy = self._take_cached_prefix(seq)
            want = min(seq.num_uncomputed, self.config.prefill_chunk, budget)
            if not self._grow(seq, seq.num_computed + want):
                self._release(seq)
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
            if adapter is not None:
                adapters.add(adapter)
            plan.scheduled.append(Scheduled.of(seq, want, want == seq.num_uncomputed))
            budget -= want
        return start_budget - budget

    def _grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Blocks for positions 0..num_tokens-1 in both tables; False if either lacks room."""
        if not self.blocks.grow(seq.blocks, num_tokens):
            return False
        window = self.blocks.window
        return window is None or window.cover(seq.window_blocks, num_tokens)

    def _release(self, seq: Sequence) -> None:
        """Drop `seq`'s references on its blocks (both tables); the lists are the caller's."""
        self.blocks.release(seq.blocks)
        if self.blocks.window is not None:
            self.blocks.window.release(seq.window_blocks)

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
            if other.req.scope != seq.req.scope:
                continue                                  # never shared: nothing to wait for
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
        window, window_src = self.blocks.window, -1
        if window is not None:             # the sliding layers copy the block's window rows too
            window_src = window.of_tree.get(src, -1)
            if window_src < 0 or window.num_available_blocks < 1:
                return None
        fresh = self.blocks.allocate(1)
        if fresh is None:
            return None
        seq.blocks.append(fresh[0])
        window_dst = -1
        if window is not None:             # evicting window_src for it is harmless: the copy
            window_dst = window.allocate(1)[0]   # runs before any forward writes a block
            seq.window_blocks.append(window_dst)
        seq.num_computed = done + common
        return BlockCopy(src, fresh[0], common, window_src, window_dst)

    def _share_blocks(self, seq: Sequence, max_blocks: int):
        """Take the longest cached run of whole blocks; returns its tree node."""
        blocks, node = self.blocks.match_prefix(seq.tokens, max_blocks, seq.req.scope)
        seq.blocks = blocks
        if self.blocks.window is not None:
            seq.window_blocks = self.blocks.window.share(blocks)
        seq.radix_node = node
        seq.num_committed_blocks = len(blocks)
        seq.num_computed = len(blocks) * self.blocks.block_size
        return node

    # ----------------------------------------------------------------- after the forward

    def postprocess(self, plan: StepPlan, logits: StepLogits | None) -> list[TokenOut | PromptLogprobs]:
        """What the step did to each sequence of `plan`, in plan order, as the step's outputs:
        a finish for each one expired or out of blocks; then per scheduled sequence its
        computed rows (full blocks offered to the prefix cache), its prompt scores, and the
        tokens its logit rows give (`logits`: the plan's rows that need them, in plan order;
        None when nothing ran), each appended and judged: does it finish the request?"""
        outs: list[TokenOut | PromptLogprobs] = [
            TokenOut(id=seq.id, token=None, finish=FINISH_DEADLINE) for seq in plan.expired]
        outs += [with_prediction_counts(seq, TokenOut(id=seq.id, token=None, finish=FINISH_LENGTH))
                 for seq in plan.cannot_fit]
        row = 0
        for item in plan.scheduled:
            end = row + item.num_logits
            self._advance(item, logits, row, end, plan, outs)
            row = end
        return outs

    def _advance(self, item: Scheduled, logits: StepLogits, row: int, end: int, plan: StepPlan,
                 outs: list) -> None:
        """One sequence after the forward; `logits` rows row..end-1 are its own."""
        seq = item.seq
        start = seq.num_computed
        seq.num_computed += item.num_tokens
        self._commit_full_blocks(seq)                    # before a token may finish it
        if seq.scores_prompt and start < seq.num_prompt:
            scores = prompt_scores.score_chunk(seq, start, logits.logits[row:row + item.num_tokens])
            if scores is not None:
                outs.append(scores)
            row = end - 1                                # the sampling row, if any
        if not item.samples:
            return
        if seq.req.max_tokens == 0:                      # scoring only: nothing is sampled
            self._finish(seq)
            outs.append(TokenOut(id=seq.id, token=None, finish=FINISH_LENGTH))
            return
        # Verification: row j's token is sampled as plain decoding would at that point; a
        # draft is accepted while it equals the token, and its K/V is then valid.
        drafts = item.drafts
        accepted, mismatched, finish = 0, False, None
        for j in range(end - row):
            result = logits.sample(seq, row + j)
            token = result.token
            finish = self._append(seq, token)
            outs.append(TokenOut(id=seq.id, token=token, logprob=result.logprob,
                                 top_logprobs=result.top_logprobs, finish=finish))
            if j < len(drafts):
                if token != drafts[j]:
                    mismatched = True
                    break
                accepted += 1
                if finish is None:
                    seq.num_computed += 1
            if finish is not None:
                break
        if drafts:
            self.drafts.settle(seq, Draft(item.draft_source, drafts), accepted, mismatched)
            plan.accepted[seq.id] = accepted
            if finish is None:
                self._commit_full_blocks(seq)            # blocks filled by accepted drafts
        if finish is not None or seq.req.prediction:
            outs[-1] = with_prediction_counts(seq, outs[-1])

    def _append(self, seq: Sequence, token: int) -> str | None:
        """The finish decision: append a sampled token; a token in the model's EOS ids
        (unless `ignore_eos`), in the request's `stop_ids`, or one that completes its grammar
        finishes it with "stop"; `max_tokens`, or the context limit, with "length"."""
        guide = seq.constraint
        seq.append(token)
        if token in seq.eos_ids or token in seq.stop_ids or (guide is not None and guide.finished):
            finish = FINISH_STOP
        elif seq.num_generated >= seq.req.max_tokens or len(seq.tokens) >= self.max_model_len:
            finish = FINISH_LENGTH
        else:
            return None
        self._finish(seq)
        return finish

    def _commit_full_blocks(self, seq: Sequence) -> None:
        """Offer newly filled blocks of computed tokens to the prefix cache; then release
        the window blocks no later query of `seq` reads (engine/kv/window.py)."""
        bs, window = self.blocks.block_size, self.blocks.window
        full = seq.num_computed // bs
        while seq.radix_node is not None and seq.num_committed_blocks < full:
            i = seq.num_committed_blocks
            key = tuple(seq.tokens[i * bs:(i + 1) * bs])
            node = self.blocks.commit(seq.radix_node, key, seq.blocks[i])
            if node is not None:
                seq.blocks[i] = node.block           # the tree's copy, when it already had one
                if window is not None:
                    seq.window_blocks[i] = window.commit(node.block, seq.window_blocks[i])
            seq.radix_node = node
            seq.num_committed_blocks += 1
        if window is not None:
            window.drop_behind(seq.window_blocks, seq.num_computed)

