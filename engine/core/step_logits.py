"""One step's logits, and how one of their rows becomes a sequence's next token.

The forward of a step gives logits [R, V] for the rows that need them (each sequence's
sampling rows in plan order, every prompt row of a request that scores its prompt).
`StepLogits` holds them with their argmax [R], taken for the whole step at once: most
rows of a busy step are plain greedy, and for them the argmax IS the token
(engine/core/sampler.py, "Batched greedy"). `sample(seq, row)` picks the path for one
row: that argmax, the grammar's sampler (engine/core/guided.py) or the full sampler,
always with the request's own seeded stream at index `seq.num_generated`.

What it is not: what the token means for the sequence (appending it, finishing the
request, verifying drafts): the scheduler's `postprocess` decides that, row by row, and
asks this object for each token in turn.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.core import sampler
from engine.core.guided import sample_guided
from engine.core.sequence import Sequence


@dataclass(frozen=True, slots=True)
class StepLogits:
    logits: np.ndarray                  # [R, V] float32: the step's rows that need logits
    argmax: np.ndarray                  # [R]: each row's raw argmax (the plain-greedy token)

    @classmethod
    def of(cls, logits: np.ndarray) -> StepLogits:
        return cls(logits, sampler.greedy_tokens(logits))

    def sample(self, seq: Sequence, row: int) -> sampler.SampleResult:
        """The token row `row` gives `seq` now (its `num_generated`-th sample)."""
        params = seq.req.params
        suppress = seq.suppress_ids()
        guide = seq.constraint
        argmax = int(self.argmax[row])
        if sampler.is_plain_greedy(params, suppress) and (guide is None or guide.allows(argmax)):
            return sampler.greedy_result(argmax)
        if guide is not None:
            return sample_guided(self.logits[row], params, guide, seed=seq.seed,
                                 sample_index=seq.num_generated, output_counts=seq.output_counts,
                                 prompt_tokens=seq.prompt_set, suppress_ids=suppress)
        prompt_set = seq.prompt_set if params.repetition_penalty != 1.0 else frozenset()
        return sampler.sample(self.logits[row], params, seed=seq.seed, sample_index=seq.num_generated,
                              output_counts=seq.output_counts, prompt_tokens=prompt_set,
                              suppress_ids=suppress)
