"""Token masks built with numpy: the matcher's byte transitions as a dense table, walked
over the vocabulary trie one depth at a time.

`DenseSteps` keeps `next[state, byte]` (int32 [rows, 256]) for one grammar's `Matcher`,
filled lazily: a cell is UNKNOWN until a walk needs it, then the matcher computes it once
(its own memo decides the answer; this is only a faster copy). `trie_mask` walks the trie
breadth-first: the states of all depth-d nodes are one gather from their parents' states
and their edge bytes, a token is allowed when the state at its end node is not DEAD. The
work per mask is numpy over the ~100k trie nodes plus Python only for transitions never
seen before; it returns the same mask as `vocab.allowed_tokens` (the per-token reference).

The table grows with the states a grammar reaches; past MAX_DENSE_STATES rows (8 MiB; a typical schema reaches 2-3 MiB)
`trie_mask` returns None and the caller uses the reference walk.
"""
from __future__ import annotations

import numpy as np

from engine.grammar.automaton import DEAD, Matcher
from engine.grammar.trie import VocabTrie

UNKNOWN = -2                    # a cell the matcher has not been asked yet
MAX_DENSE_STATES = 8192         # rows of [256] int32: 8 MiB per grammar at most
_FIRST_ROWS = 64


class DenseSteps:
    """`matcher.step` as a lazily filled int32 [rows, 256] table (engine thread only)."""

    def __init__(self, matcher: Matcher):
        self.matcher = matcher
        self.next = np.full((_FIRST_ROWS, 256), UNKNOWN, dtype=np.int32)   # [rows, 256]
        self.cells_filled = 0

    def fits(self, top_state: int) -> bool:
        """Make room for rows 0..top_state; False past MAX_DENSE_STATES."""
        rows = self.next.shape[0]
        if top_state >= MAX_DENSE_STATES:
            return False
        if top_state < rows:
            return True
        grown = min(MAX_DENSE_STATES, max(2 * rows, top_state + 1))
        more = np.full((grown - rows, 256), UNKNOWN, dtype=np.int32)
        self.next = np.concatenate([self.next, more])
        return True

    def gather(self, states: np.ndarray, data: np.ndarray) -> np.ndarray:
        """int32 [n] next states for live `states` [n] and bytes `data` [n] (rows must fit)."""
        out = self.next[states, data]                                      # [n]
        unknown = out == UNKNOWN
        if unknown.any():
            pairs = np.unique(states[unknown].astype(np.int64) * 256 + data[unknown])
            step = self.matcher.step
            for pair in pairs.tolist():
                self.next[pair >> 8, pair & 255] = step(pair >> 8, pair & 255)
            self.cells_filled += len(pairs)
            out[unknown] = self.next[states[unknown], data[unknown]]
        return out


def trie_mask(trie: VocabTrie, steps: DenseSteps, state: int, num_entries: int) -> np.ndarray | None:
    """bool [N] over the sorted entries: the automaton accepts the token's bytes from `state`.
    None when the grammar has more states than the dense table holds."""
    ok = np.zeros(num_entries, dtype=bool)                                 # [N]
    states = np.array([state], dtype=np.int32)                             # [n_0] the root
    for d in range(1, trie.depth + 1):
        parent_states = states[trie.parent[d]]                             # [n_d]
        live = np.flatnonzero(parent_states != DEAD)
        if live.size == 0:
            break                                                          # every deeper node is dead too
        if not steps.fits(int(parent_states[live].max())):
            return None
        states = np.full(parent_states.shape, DEAD, dtype=np.int32)
        states[live] = steps.gather(parent_states[live], trie.byte[d][live])
        ends = trie.end_node[d]
        ok[trie.end_entry[d]] = states[ends] != DEAD
    return ok
