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

from dataclasses import dataclass, field

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


MAX_TABLE_ROWS = 64             # row counts the table keeps (larger steps: extrapolated)
TABLE_KEEP = 0.9                # weight an entry keeps when its row count is seen again


@dataclass(slots=True)
class RowCostTable:
    """Seconds of a step by its exact row count: an average per count seen (engine thread).

    A few-row step is not affine in its rows: one row is a matrix-vector product that reads
    each weight once, while 2+ rows cost a jump (bench/step_rows.py: with the shapes
    engine/model/project.py picks, 2-8 rows take ~1.6-2x one row on 2 cores, then grow
    slowly; a plain gemm of 2-7 rows took 2.3-3x).
    The table keeps that shape for the speculation policy; `curve` fills the counts not
    seen by interpolating between seen ones and, outside them, scaling the nearest seen
    count by the affine `1 + rows * per_row_ratio`.
    """
    seconds_by_rows: dict[int, float] = field(default_factory=dict)
    observations: int = 0

    def observe(self, num_rows: int, step_s: float) -> None:
        if 1 <= num_rows <= MAX_TABLE_ROWS and step_s > 0.0:      # a frozen test clock: nothing
            old = self.seconds_by_rows.get(num_rows)
            self.seconds_by_rows[num_rows] = step_s if old is None else \
                old * TABLE_KEEP + step_s * (1.0 - TABLE_KEEP)
            self.observations += 1

    def curve(self, per_row_ratio: float) -> list[float] | None:
        """Seconds for rows 0..MAX_TABLE_ROWS (index = rows; [0] unused), None if nothing seen."""
        if not self.seconds_by_rows:
            return None
        seen = sorted(self.seconds_by_rows.items())                 # [(rows, seconds)] ascending

        def scaled(rows: int, near: tuple[int, float]) -> float:
            return near[1] * (1.0 + rows * per_row_ratio) / (1.0 + near[0] * per_row_ratio)

        out, i = [0.0], 0
        for rows in range(1, MAX_TABLE_ROWS + 1):
            while i < len(seen) and seen[i][0] < rows:
                i += 1
            if i < len(seen) and seen[i][0] == rows:
                out.append(seen[i][1])
            elif i == 0:
                out.append(scaled(rows, seen[0]))                   # below every count seen
            elif i == len(seen):
                out.append(scaled(rows, seen[-1]))                  # above every count seen
            else:
                (lo, lo_s), (hi, hi_s) = seen[i - 1], seen[i]
                out.append(lo_s + (hi_s - lo_s) * (rows - lo) / (hi - lo))
        return out
