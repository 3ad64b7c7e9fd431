"""What one sequence computes in one step: the value the scheduler's plan hands the runner.

A `Chunk` is a decode row (one token), a prefill piece, or a speculative verification (the
last token plus its drafts) of one sequence. `engine/core/runner.py` runs a list of them in
one batched forward and `engine/core/attention_plan.py` groups them; both import it from
here, so neither needs the other for the type. A chunk names the LoRA adapter its
sequence runs on (None: the base); the runner groups the step's rows by it
(engine/model/lora_batch.py), and, with a window pool, the sliding layers' own table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.model.lora import LoraAdapter


@dataclass(frozen=True, slots=True)
class Chunk:
    """Tokens of one sequence computed in this step, at positions start_pos .. start_pos+n-1."""
    tokens: tuple[int, ...]
    start_pos: int
    block_table: tuple[int, ...]     # covers every position up to start_pos + n - 1
    num_logits: int                  # the last num_logits rows need logits (0: mid-prefill)
    seq_id: int = -1                 # identifies the sequence to the decode mirror (-1: none)
    adapter: LoraAdapter | None = None   # the sequence's LoRA adapter (None: the base alone)
    # The sliding layers' table (engine/kv/window.py), entry for entry beside block_table; the
    # entries before the chunk's windows may be -1 (dropped). None: those layers use block_table.
    window_table: tuple[int, ...] | None = None
