"""A measurement beside its limit: what the wall-clock checks (bench/timing_checks.py) print.

Each `LimitCheck` is one row of the table (name, value, the bound, the limit, PASS or MISS)
and one JSON line; `report` prints the JSON lines and the tally, and gives the exit status:
1 when any check missed its limit. The limits are the project's speed targets, kept here
rather than in tests: a loaded host makes a timed assert flaky, a benchmark run on a quiet
machine does not.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class LimitCheck:
    """One measured value and the limit it must stay under (or, `at_least`, reach)."""
    name: str
    value: float
    limit: float
    unit: str                        # "s", "us", "tokens", ...
    at_least: bool = False           # True: value >= limit passes; False: value < limit
    note: str = ""                   # what the reader needs beside the number

    @property
    def passed(self) -> bool:
        return self.value >= self.limit if self.at_least else self.value < self.limit

    def row(self) -> str:
        bound = ">=" if self.at_least else "<"
        verdict = "PASS" if self.passed else "MISS"
        return (f"{self.name:<46} {self.value:>11.4g} {bound:>2} {self.limit:<9.4g} "
                f"{self.unit:<6} {verdict}  {self.note}").rstrip()

    def json_line(self) -> str:
        doc = {"check": self.name, "value": round(self.value, 7), "limit": round(self.limit, 7),
               "unit": self.unit, "bound": "min" if self.at_least else "max",
               "pass": self.passed}
        return json.dumps({**doc, "note": self.note} if self.note else doc)


def report(checks: list[LimitCheck], out: TextIO = sys.stdout) -> int:
    """Print one JSON line per check and the tally; -> the exit status (1: a miss)."""
    for check in checks:
        print(check.json_line(), file=out)
    missed = [c.name for c in checks if not c.passed]
    print(f"{len(checks) - len(missed)} PASS, {len(missed)} MISS"
          + (f": {', '.join(missed)}" if missed else ""), file=out)
    return 1 if missed else 0
