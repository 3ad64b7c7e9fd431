"""Step cost: how long a step of n rows takes on this machine, learned from the steps run.

The latency policy (engine/core/scheduler.py) must know how many prompt rows a step may
hold before the decoding streams, who wait one step per token, miss the inter-token
target. A step's time is close to affine in its rows,

    step_s ~= fixed_s + per_row_s * rows          (fixed_s: the per-step Python and the
                                                   weights' read; per_row_s: the arithmetic)

so this keeps an exponentially weighted least-squares fit of (rows, seconds) over the
recent steps (forgetting `COST_DECAY` a step: the machine's load changes) and answers
`rows_within(target_s)`: the most rows whose predicted step stays within the target.
Until `MIN_STEPS_OBSERVED` steps with different row counts have been seen, or while the
fit makes no sense (a step not slower with more rows), it answers None and the caller
falls back to its fixed allowance. The speculation policy keeps a second one over decode
steps only (engine/core/drafts/policy.py), where a step's rows are decode rows and drafts.
"""
from __future__ import annotations

from dataclasses import dataclass

COST_DECAY = 0.97               # weight kept per step: about the last 30 steps count
MIN_STEPS_OBSERVED = 8          # fewer: no fit, the fixed allowance applies
MIN_ROW_SPREAD = 4.0            # rows' weighted standard deviation below this: no slope yet


@dataclass(slots=True)
class StepCostModel:
    """Weighted sums of a least-squares fit of seconds on rows (engine thread only)."""
    weight: float = 0.0
    rows: float = 0.0               # sum w * x
    seconds: float = 0.0            # sum w * y
    rows_sq: float = 0.0            # sum w * x^2
    rows_seconds: float = 0.0       # sum w * x * y
    steps: int = 0
    min_row_spread: float = MIN_ROW_SPREAD      # a narrower spread of rows: no slope yet

    def observe(self, num_rows: int, step_s: float) -> None:
        """One finished step of `num_rows` rows that took `step_s` seconds."""
        for name in ("weight", "rows", "seconds", "rows_sq", "rows_seconds"):
            setattr(self, name, getattr(self, name) * COST_DECAY)
        self.weight += 1.0
        self.rows += num_rows
        self.seconds += step_s
        self.rows_sq += num_rows * num_rows
        self.rows_seconds += num_rows * step_s
        self.steps += 1

    def fit(self) -> tuple[float, float] | None:
        """(fixed_s, per_row_s), or None while the steps seen cannot tell them apart."""
        if self.steps < MIN_STEPS_OBSERVED:
            return None
        mean_rows, mean_s = self.rows / self.weight, self.seconds / self.weight
        var_rows = self.rows_sq / self.weight - mean_rows * mean_rows
        if var_rows < self.min_row_spread ** 2:
            return None
        per_row_s = (self.rows_seconds / self.weight - mean_rows * mean_s) / var_rows
        if per_row_s <= 0.0:
            return None
        return max(0.0, mean_s - per_row_s * mean_rows), per_row_s

    def rows_within(self, target_s: float) -> int | None:
        """The most rows a step may hold to take at most `target_s` (None: not known yet)."""
        fitted = self.fit()
        if fitted is None:
            return None
        fixed_s, per_row_s = fitted
        return max(0, int((target_s - fixed_s) / per_row_s))
