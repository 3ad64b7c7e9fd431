"""The plan of one step: the value the scheduler hands the engine, and gets back after the forward.

`Scheduler.schedule` (engine/core/scheduler.py) returns a `StepPlan`: per sequence that runs,
a `Scheduled` row (how many tokens to compute from `seq.num_computed` on, which drafts to
verify after them, how many of its rows need logits); the K/V copies of prefix hits that end
inside a block (`BlockCopy`, run before the forward); who was preempted, expired or could not
fit. The engine builds the forward's chunks from it, and `Scheduler.postprocess` walks it again
with the step's logits, noting the drafts each sequence had accepted. The step records
(engine/core/snapshot.py) read it too, so the type lives here, apart from the scheduler.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.sequence import Sequence
from engine.types import RequestId


@dataclass(frozen=True, slots=True)
class Scheduled:
    seq: Sequence
    num_tokens: int                     # tokens computed this step, from seq.num_computed on
    samples: bool                       # the chunk reaches the last known token: its last rows sample
    drafts: tuple[int, ...] = ()        # speculative tokens appended after the last token
    draft_source: str = ""              # the draft source that proposed them
    num_logits: int = 0                 # its last rows that need logits (0: mid-prefill)

    @classmethod
    def of(cls, seq: Sequence, num_tokens: int, samples: bool, drafts: tuple[int, ...] = (),
           source: str = "") -> Scheduled:
        """`seq`'s row of the plan, from `seq.num_computed` on: a chunk that reaches its last
        token samples from its last 1 + drafts rows; a prompt being scored needs every row."""
        if seq.scores_prompt and seq.num_computed < seq.num_prompt:
            num_logits = num_tokens + len(drafts)
        else:
            num_logits = 1 + len(drafts) if samples else 0
        return cls(seq, num_tokens, samples, drafts, source, num_logits)


@dataclass(frozen=True, slots=True)
class BlockCopy:
    """Copy K/V rows 0..num_tokens-1 of a cached block into a sequence's own new block (for
    every layer) before the step's forward: a prefix hit that ends inside a block."""
    src_block: int
    dst_block: int
    num_tokens: int
    window_src: int = -1                # the same in the window pool's layers (-1: no window pool)
    window_dst: int = -1


@dataclass(slots=True)
class StepPlan:
    """One step: who runs (`scheduled`, in row order), and who stopped while it was planned."""
    scheduled: list[Scheduled] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    expired: list[Sequence] = field(default_factory=list)       # waited past their deadline: finished
    cannot_fit: list[Sequence] = field(default_factory=list)    # alone and out of blocks: finished
    copies: list[BlockCopy] = field(default_factory=list)       # run before the forward
    prefill_tokens: int = 0         # prompt rows in the step (not decode rows, not drafts)
    prefill_allowance: int = 0      # the latency policy's limit on them
    accepted: dict[RequestId, int] = field(default_factory=dict)   # postprocess: drafts the model produced

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens + len(s.drafts) for s in self.scheduled)
