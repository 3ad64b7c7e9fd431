"""Read-only pictures of the engine for people: one record per step, and a bounded snapshot.

What it is: two frozen values the server shows (the engine view, the step trace) and the
functions that build them on the engine thread, between steps.

* `StepRecord`: what one `Engine.step()` did -- its phase times (schedule, forward,
  sample) and its rows (which sequence, how many tokens, prefill or decode). Built only
  while `Engine.record_steps` is on, so a server without a viewer pays nothing.
* `EngineSnapshot`: the KV block pool as one letter per block, the running sequences
  with their counts and block tables, the waiting queue with priorities, and the radix
  tree as chains of blocks ("segments") with reference counts. Every list is capped
  (the `MAX_SNAPSHOT_*` constants) so the value stays small whatever the load.

What it is not: a way in. Only ids, counts, priorities and block numbers are copied --
never a token id or text, which belong to the people who sent them.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.core.plan import StepPlan
from engine.core.sequence import Sequence
from engine.kv.blocks import BlockManager
from engine.kv.radix import RadixNode

MAX_SNAPSHOT_BLOCKS = 16384        # grid cells; a bigger pool shows its first blocks only
MAX_SNAPSHOT_SEQS = 128            # running sequences listed
MAX_SNAPSHOT_WAITING = 128         # waiting sequences listed
MAX_SNAPSHOT_SEGMENTS = 256        # radix tree segments listed
MAX_SEGMENT_BLOCKS = 32            # block ids listed per segment (its length is always given)
MAX_SEQ_BLOCKS = 64                # block ids listed per running sequence (its count is given)

# One letter per KV block in `EngineSnapshot.block_states`.
BLOCK_FREE = "f"                   # on the free list
BLOCK_USED = "u"                   # held by exactly one running sequence
BLOCK_SHARED = "s"                 # held by several running sequences (a shared prefix)
BLOCK_CACHED = "c"                 # held by nobody, kept in the radix tree for reuse


@dataclass(frozen=True, slots=True)
class StepRow:
    """One sequence's part of a step."""
    seq_id: int
    num_tokens: int                 # tokens computed for it (drafts not included)
    is_prefill: bool                # a prompt piece (or a recompute), not a one-token decode
    num_drafts: int = 0             # speculative tokens verified after them
    num_accepted: int = 0           # ... of which the model produced (accepted drafts)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step: its phase boundaries on the engine clock (seconds) and its rows."""
    step: int                       # Engine.stats().steps_total after this step
    start_s: float
    scheduled_s: float              # schedule phase: start_s .. scheduled_s
    forward_s: float                # forward phase: scheduled_s .. forward_s
    end_s: float                    # sample (and commit) phase: forward_s .. end_s
    rows: tuple[StepRow, ...]
    preempted: tuple[int, ...]      # sequence ids sent back to the queue in this step

    @property
    def batch_tokens(self) -> int:
        return sum(r.num_tokens + r.num_drafts for r in self.rows)

    @property
    def prefill_rows(self) -> int:
        return sum(1 for r in self.rows if r.is_prefill)

    @property
    def decode_rows(self) -> int:
        return sum(1 for r in self.rows if not r.is_prefill)

    @property
    def drafted_rows(self) -> int:
        return sum(r.num_drafts for r in self.rows)

    @property
    def accepted_rows(self) -> int:
        return sum(r.num_accepted for r in self.rows)


def step_record(step: int, times_s: tuple[float, float, float, float],
                plan: StepPlan, accepted: dict[int, int]) -> StepRecord:
    """`accepted`: sequence id -> drafts of this step the model produced."""
    rows = tuple(StepRow(item.seq.id, item.num_tokens,
                         not (item.samples and item.num_tokens == 1), len(item.drafts),
                         accepted.get(item.seq.id, 0))
                 for item in plan.scheduled)
    return StepRecord(step, *times_s, rows=rows,
                      preempted=tuple(seq.id for seq in plan.preempted))


@dataclass(frozen=True, slots=True)
class SeqView:
    """A running sequence: counts and its block table (first MAX_SEQ_BLOCKS ids)."""
    id: int
    priority: int
    prompt_tokens: int
    computed_tokens: int            # tokens with K/V in the cache
    generated_tokens: int
    num_blocks: int
    blocks: tuple[int, ...]
    adapter: str = ""               # its LoRA adapter's name ("": the base)


@dataclass(frozen=True, slots=True)
class WaitingView:
    """A waiting sequence, in scheduling order."""
    id: int
    priority: int
    tokens: int                     # prompt + output so far (a preempted one has output)
    generated_tokens: int


@dataclass(frozen=True, slots=True)
class RadixSegment:
    """A chain of radix nodes without branches: `num_blocks` full blocks of one prefix."""
    id: int                         # the first block's id
    parent: int                     # the parent segment's id; -1 under the root
    num_blocks: int
    blocks: tuple[int, ...]         # the first MAX_SEGMENT_BLOCKS block ids
    refs: tuple[int, ...]           # reference count of each listed block (0: cached only)


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """The engine between two steps, in ids, counts and block numbers only."""
    num_blocks: int
    block_size: int
    block_states: str               # one BLOCK_* letter per block (first MAX_SNAPSHOT_BLOCKS)
    running: tuple[SeqView, ...]
    waiting: tuple[WaitingView, ...]
    radix: tuple[RadixSegment, ...]
    num_running: int                # totals before the caps
    num_waiting: int
    num_radix_nodes: int


def build_snapshot(running: list[Sequence], waiting: list[Sequence],
                   blocks: BlockManager) -> EngineSnapshot:
    return EngineSnapshot(
        num_blocks=blocks.num_blocks, block_size=blocks.block_size,
        block_states=_block_states(blocks),
        running=tuple(SeqView(s.id, s.req.priority, s.num_prompt, s.num_computed,
                              s.num_generated, len(s.blocks), tuple(s.blocks[:MAX_SEQ_BLOCKS]),
                              s.req.scope.adapter.name if s.req.scope.adapter else "")
                      for s in running[:MAX_SNAPSHOT_SEQS]),
        waiting=tuple(WaitingView(s.id, s.req.priority, len(s.tokens), s.num_generated)
                      for s in waiting[:MAX_SNAPSHOT_WAITING]),
        radix=_segments(blocks),
        num_running=len(running), num_waiting=len(waiting),
        num_radix_nodes=len(blocks.radix) if blocks.radix is not None else 0)


def _block_states(blocks: BlockManager) -> str:
    in_tree = blocks.radix.node_of_block if blocks.radix is not None else {}
    letters = []
    for block, ref in enumerate(blocks.ref_counts[:MAX_SNAPSHOT_BLOCKS]):
        if ref > 1:
            letters.append(BLOCK_SHARED)
        elif ref == 1:
            letters.append(BLOCK_USED)
        else:
            letters.append(BLOCK_CACHED if block in in_tree else BLOCK_FREE)
    return "".join(letters)


def _segments(blocks: BlockManager) -> tuple[RadixSegment, ...]:
    """The tree as segments, depth first: a segment starts below the root or a branch and
    runs down while each node has exactly one child."""
    if blocks.radix is None:
        return ()
    out: list[RadixSegment] = []
    stack: list[tuple[RadixNode, int]] = [(c, -1) for root in blocks.radix.roots()
                                          for c in root.children.values()]
    while stack and len(out) < MAX_SNAPSHOT_SEGMENTS:
        node, parent = stack.pop()
        chain = [node]
        while len(node.children) == 1:
            node = next(iter(node.children.values()))
            chain.append(node)
        shown = chain[:MAX_SEGMENT_BLOCKS]
        out.append(RadixSegment(chain[0].block, parent, len(chain),
                                tuple(n.block for n in shown),
                                tuple(blocks.ref_counts[n.block] for n in shown)))
        stack.extend((c, chain[0].block) for c in node.children.values())
    return tuple(out)
