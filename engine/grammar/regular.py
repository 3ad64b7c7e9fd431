"""Intersection and difference of two regular languages, as one small DFA over character ranges.

A string format beside a pattern must match both, and a pattern's look-ahead `(?!X)` keeps
the strings that do not start with X: neither is a sequence, alternation or repeat, so the
automaton builds them (expression kinds "i" and "d", expr.py) from two call-free
sub-automata in three steps:

1. `determinise`: the subset construction over an NFA in automaton.py's form (edges
   `[state] -> [(label, dst)]`, label None an epsilon, `("c", ranges)` one character). The
   code points are cut wherever some edge's set begins or ends, so the edges out of a DFA
   state read disjoint sets and every character leads to at most one state.
2. `product`: a walk over pairs (left state, right state). For a difference the right side
   may have died (`GONE`): the text has left the right language for good.
3. trimming: only pairs from which some accepting pair can still be reached are kept, so the
   runner never walks into a text it cannot finish.

Every DFA and pair state is paid for from the compile's `WorkBudget` (`STATE_WORK` each,
plus one unit per range compared), so a product that would be huge is refused, not slow.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.grammar import charset
from engine.grammar.budget import WorkBudget

STATE_WORK = 8                  # units per DFA or pair state (as automaton.py's NFA_STATE_WORK)
GONE = -1                       # the right side's state once the text has left its language


@dataclass(frozen=True)
class Dfa:
    """State 0 starts; `edges[state]` reads disjoint character sets."""
    edges: tuple[tuple[tuple[charset.Ranges, int], ...], ...]
    accepting: frozenset[int]

    @property
    def empty(self) -> bool:
        return not self.edges


def _closure(edges, states, budget: WorkBudget) -> frozenset[int]:
    seen, todo = set(states), list(states)
    while todo:
        for label, dst in edges[todo.pop()]:
            budget.spend(1)
            if label is None and dst not in seen:
                seen.add(dst)
                todo.append(dst)
    return frozenset(seen)


def _split(labelled: list[tuple[charset.Ranges, int]], budget: WorkBudget) -> list[tuple[charset.Ranges, frozenset]]:
    """Cut the code points where any set begins or ends: [(ranges, targets)], targets the
    `dst`s of the edges that read every code point of those ranges."""
    cuts = sorted({lo for ranges, _ in labelled for lo, _ in ranges}
                  | {hi + 1 for ranges, _ in labelled for _, hi in ranges})
    budget.spend(len(cuts) * len(labelled))
    by_targets: dict[frozenset, list[tuple[int, int]]] = {}
    for lo, nxt in zip(cuts, cuts[1:]):
        targets = frozenset(dst for ranges, dst in labelled if charset.contains(ranges, lo))
        if targets:
            by_targets.setdefault(targets, []).append((lo, nxt - 1))
    return [(charset.normalize(spans), targets) for targets, spans in by_targets.items()]


def determinise(edges, start: int, end: int, budget: WorkBudget) -> Dfa:
    """The NFA `edges` from `start` to `end` as a DFA (states: sets of NFA states, closed)."""
    first = _closure(edges, {start}, budget)
    index, order = {first: 0}, [first]
    out, accepting = [], set()
    while len(out) < len(order):
        subset = order[len(out)]
        budget.spend(STATE_WORK)
        if end in subset:
            accepting.add(len(out))
        labelled = [(label[1], dst) for s in subset for label, dst in edges[s] if label is not None]
        row = []
        for ranges, targets in _split(labelled, budget):
            nxt = _closure(edges, targets, budget)
            if nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
            row.append((ranges, index[nxt]))
        out.append(tuple(row))
    return Dfa(tuple(out), frozenset(accepting))


def product(left: Dfa, right: Dfa, *, keep_right: bool, budget: WorkBudget) -> Dfa:
    """The strings of `left` that are (keep_right) or are not (not keep_right) strings of
    `right`, trimmed to the states that can still accept (no states: no such string)."""
    index, order = {(0, 0): 0}, [(0, 0)]
    rows: list[list[tuple[charset.Ranges, int]]] = []
    accepting = set()
    while len(rows) < len(order):
        a, b = order[len(rows)]
        budget.spend(STATE_WORK)
        in_right = b != GONE and b in right.accepting
        if a in left.accepting and in_right == keep_right:
            accepting.add(len(rows))
        right_edges = right.edges[b] if b != GONE else ()
        pairs: list[tuple[charset.Ranges, tuple[int, int]]] = []
        for ranges_a, dst_a in left.edges[a]:
            for ranges_b, dst_b in right_edges:
                budget.spend(1)
                both = charset.intersect(ranges_a, ranges_b)
                if both:
                    pairs.append((both, (dst_a, dst_b)))
            if not keep_right:                          # what the right side cannot read kills it
                rest = charset.minus(ranges_a, charset.union(*(r for r, _ in right_edges)))
                if rest:
                    pairs.append((rest, (dst_a, GONE)))
        merged: dict[tuple[int, int], list[charset.Ranges]] = {}
        for ranges, pair in pairs:
            merged.setdefault(pair, []).append(ranges)
        row = []
        for pair, sets in merged.items():
            if pair not in index:
                index[pair] = len(order)
                order.append(pair)
            row.append((charset.union(*sets), index[pair]))
        rows.append(row)
    return _trim(rows, accepting, budget)


def _trim(rows: list[list[tuple[charset.Ranges, int]]], accepting: set[int], budget: WorkBudget) -> Dfa:
    """Keep the states some accepting state is reachable from, renumbered (start stays 0)."""
    into: list[list[int]] = [[] for _ in rows]
    for src, row in enumerate(rows):
        for _, dst in row:
            into[dst].append(src)
    alive, todo = set(accepting), list(accepting)
    while todo:
        for src in into[todo.pop()]:
            budget.spend(1)
            if src not in alive:
                alive.add(src)
                todo.append(src)
    if 0 not in alive:
        return Dfa((), frozenset())
    kept = [s for s in range(len(rows)) if s in alive]              # 0 first: the start stays 0
    new = {s: i for i, s in enumerate(kept)}
    edges = tuple(tuple((ranges, new[dst]) for ranges, dst in rows[s] if dst in alive) for s in kept)
    return Dfa(edges, frozenset(new[s] for s in accepting))
