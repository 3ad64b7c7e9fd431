"""One request's mutable state inside the engine: its tokens, its blocks, its progress.

What it is: the hot state the scheduler, the runner and the sampler share for a request,
in a `__slots__` class (ARCHITECTURE 3.4). Invariants:

* `tokens` = prompt + generated tokens; `num_computed` of them have K/V in the cache.
  A sequence is *decoding* when exactly one token is left to compute (the last sampled
  one), *prefilling* when more are (the prompt, or prompt + output after a preemption).
* `blocks` is the block table: `blocks[i]` holds positions `i*bs .. (i+1)*bs - 1`.
* `window_blocks` is the window table (engine/kv/window.py) when the model has a window
  pool: the sliding layers' block for each entry of `blocks`, -1 once behind the window.
* `num_committed_blocks` leading blocks are in the radix tree (or shared from it), and
  `radix_node` is the tree node of the last of them (None: this sequence does not share).

What it is not: a request's public description (`engine.api.GenRequest` is that value).
"""
from __future__ import annotations

from engine.types import GenRequest


class Sequence:
    __slots__ = ("id", "req", "tokens", "num_prompt", "num_computed", "blocks", "window_blocks",
                 "seed",
                 "arrival", "num_generated", "output_counts", "radix_node",
                 "num_committed_blocks", "was_scheduled", "stop_ids", "eos_ids",
                 "_prompt_set", "constraint", "num_prompt_scored", "prompt_scored",
                 "waited_for_prefix", "draft_misses", "draft_pause_steps", "drafts")

    def __init__(self, seq_id: int, req: GenRequest, *, seed: int, arrival: int,
                 eos_ids: frozenset[int]):
        self.id = seq_id
        self.req = req
        self.tokens: list[int] = [int(t) for t in req.prompt]
        self.num_prompt = len(self.tokens)
        self.num_computed = 0
        self.blocks: list[int] = []
        self.window_blocks: list[int] = []           # the sliding layers' table (window pool only)
        self.seed = seed
        self.arrival = arrival                       # admission order (FCFS tie-break)
        self.num_generated = 0
        self.output_counts: dict[int, int] = {}
        self.radix_node = None
        self.num_committed_blocks = 0
        self.was_scheduled = False                   # deadlines only apply before the first step
        self.stop_ids = frozenset(int(t) for t in req.stop_ids)
        self.eos_ids = frozenset() if req.params.ignore_eos else eos_ids
        self._prompt_set = None
        self.constraint = None                       # engine.grammar Constraint, set by the engine
        self.num_prompt_scored = 1                   # prompt scoring: the next token to score
        self.prompt_scored = False                   # ... and whether the prompt is done
        self.waited_for_prefix = False               # passed over once for a prefix in flight
        self.draft_misses = 0                        # speculation: all-rejected drafts in a row
        self.draft_pause_steps = 0                   # ... and the steps left without drafts
        self.drafts = None                           # engine/core/drafts/policy.py SeqDrafts, made on use

    @property
    def sort_key(self) -> tuple[int, int]:
        """Scheduling order: higher priority first, then earlier arrival."""
        return (-self.req.priority, self.arrival)

    @property
    def scores_prompt(self) -> bool:
        """Every prompt position is computed and scored (engine/core/prompt_scores.py)."""
        return self.req.prompt_logprobs is not None

    @property
    def num_uncomputed(self) -> int:
        return len(self.tokens) - self.num_computed

    @property
    def prompt_set(self) -> frozenset[int]:
        if self._prompt_set is None:
            self._prompt_set = frozenset(self.tokens[:self.num_prompt])
        return self._prompt_set

    def suppress_ids(self) -> tuple[int, ...]:
        """Ids masked from sampling: EOS and stop ids until `min_tokens` tokens exist."""
        if self.num_generated >= self.req.params.min_tokens:
            return ()
        return tuple(sorted(self.eos_ids | self.stop_ids))

    def append(self, token: int) -> None:
        self.tokens.append(token)
        self.num_generated += 1
        self.output_counts[token] = self.output_counts.get(token, 0) + 1
        if self.constraint is not None:
            self.constraint.advance(token)

    def reset_for_recompute(self) -> None:
        """After preemption: nothing cached any more; prompt + output will be prefilled."""
        self.num_computed = 0
        self.blocks = []
        self.window_blocks = []
        self.radix_node = None
        self.num_committed_blocks = 0
