"""The work one grammar compile may do, counted in units across every step of it.

A compile is a pipeline (schema walk -> expressions -> NFA -> closures) and each stage can
be made to loop or recurse by a small request: a deep schema, a long enum, digits of a
bound, nested regex repeats. One `WorkBudget` is created per compile and every stage spends
from it, so the whole compile is bounded, not each stage on its own. A unit is about half a
microsecond of CPython work: `MAX_COMPILE_WORK` units keep any compile well under a second (0.4 s on a loaded 2-core host)
(bench/grammar_times.py measures it). Past the budget the compile stops with
`GrammarInvalid` naming the limit, and the refusal is cached like a success (compile.py).
"""
from __future__ import annotations

from engine.grammar.errors import GrammarInvalid

MAX_COMPILE_WORK = 400_000      # work units of one compile (about 0.5-1.7 us each)


class WorkBudget:
    """Units a compile may still spend; `spent` is what it has spent so far."""

    def __init__(self, units: int = MAX_COMPILE_WORK):
        self.limit = units
        self.spent = 0

    def spend(self, units: int) -> None:
        self.spent += units
        if self.spent > self.limit:
            raise GrammarInvalid(f"the schema or pattern is too large to compile: it needs more than "
                                 f"{self.limit} construction steps (MAX_COMPILE_WORK is {MAX_COMPILE_WORK})")
