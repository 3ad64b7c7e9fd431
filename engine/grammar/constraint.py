"""The per-sequence constraint the sampler consults, and the per-grammar runtime it shares.

`GrammarRuntime` (one per compiled grammar, engine thread only) owns the `Matcher`, its
dense transition table (dense.py) and a bounded cache of masks by automaton state, shared
by every sequence of that grammar: rows of a batch sit in a few states (inside a string,
after a key), so one build serves them all. `Constraint` is one sequence's cursor: its
state after the tokens generated so far. The sampler asks `allows(token)` for the token it
sampled first (a few memoised byte steps) and `mask()` only when that token is refused or
the request needs the whole masked distribution (filters, logprobs).

EOS is allowed exactly where the automaton accepts; after it (`finished`) nothing is.
`forced_drafts` proposes the text the grammar forces next as tokens (forced.py), cached per
state beside the masks; it reads the cursor and never moves it. `advance` tells forced.py
which token the model wrote from which state, so drafts spell forced text as models do.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import numpy as np

from engine.grammar.automaton import DEAD, Grammar, Matcher
from engine.grammar.dense import DenseSteps, trie_mask
from engine.grammar.forced import ForcedDrafts
from engine.grammar.layout import TextView, feed
from engine.grammar.vocab import TokenTable, allowed_tokens, build_table

MAX_CACHED_MASKS = 512          # masks kept per grammar (each [V] bool: 49 KB for smol-135m)
MAX_CACHED_RUNTIMES = 64        # grammars whose run-time tables the engine keeps


class GrammarRuntime:
    def __init__(self, grammar: Grammar, table: TokenTable, encode: Callable[[str], list[int]] | None = None):
        self.grammar, self.table = grammar, table
        self.matcher = Matcher(grammar)
        self.dense = DenseSteps(self.matcher)
        self.forced = ForcedDrafts(self.matcher, table, encode, self.step_token)   # encode None: no drafts
        self._masks: OrderedDict[int, np.ndarray] = OrderedDict()
        self.masks_built = 0            # full vocabulary walks (the counter tests read)

    def step_token(self, state: int, token: int) -> int:
        data = self.table.token_bytes[token] if 0 <= token < self.table.vocab_size else None
        return DEAD if data is None else self.matcher.step_bytes(state, data)

    def mask(self, state: int) -> np.ndarray:
        cached = self._masks.get(state)
        if cached is not None:
            self._masks.move_to_end(state)
            return cached
        mask = self._build(state)
        self._masks[state] = mask
        if len(self._masks) > MAX_CACHED_MASKS:
            self._masks.popitem(last=False)
        return mask

    def _build(self, state: int) -> np.ndarray:
        """bool [V]; a state no character may follow needs no walk (EOS if it accepts)."""
        table = self.table
        if not self.matcher.can_continue(state):
            mask = np.zeros(table.vocab_size, dtype=bool)
            if self.matcher.accepts(state):
                mask[list(table.eos_ids)] = True
            return mask
        self.masks_built += 1
        ok = trie_mask(table.trie, self.dense, state, len(table.sorted_bytes))        # [N] sorted order
        if ok is None:                                  # too many states for the dense table
            return allowed_tokens(table, self.matcher, state)
        mask = np.zeros(table.vocab_size, dtype=bool)
        mask[table.sorted_ids[ok]] = True
        if self.matcher.accepts(state):
            mask[list(table.eos_ids)] = True
        return mask


class Constraint:
    """One sequence's position in its grammar."""
    __slots__ = ("runtime", "state", "finished", "view")

    def __init__(self, runtime: GrammarRuntime):
        self.runtime = runtime
        self.state = runtime.matcher.initial
        self.finished = False
        self.view = TextView()          # the text's JSON layout so far: drafts' whitespace (layout.py)

    def allows(self, token: int) -> bool:
        if self.finished:
            return False
        if token in self.runtime.table.eos_ids:
            return self.runtime.matcher.accepts(self.state)
        return self.runtime.step_token(self.state, token) != DEAD

    def mask(self) -> np.ndarray:
        """bool [V] of the tokens allowed next."""
        if self.finished:
            return np.zeros(self.runtime.table.vocab_size, dtype=bool)
        return self.runtime.mask(self.state)

    def advance(self, token: int) -> None:
        if token in self.runtime.table.eos_ids:
            self.finished = True
            return
        nxt = self.runtime.step_token(self.state, token)
        if nxt != DEAD:                      # a refused token (never sampled) leaves the state
            self.runtime.forced.learn(self.state, token)
            self.state = nxt
            self.view = feed(self.view, self.runtime.table.token_bytes[token])

    def forced_drafts(self, max_tokens: int) -> list[int]:
        """Up to `max_tokens` token ids for the text the grammar forces next (speculation's
        grammar draft source, forced.py); each is allowed after the ones before it, none is
        EOS. [] where the model has a choice. The cursor does not move."""
        if self.finished or max_tokens <= 0:
            return []
        return self.runtime.forced.drafts(self.state, self.view, max_tokens)

    @property
    def complete(self) -> bool:
        """The text so far is a whole sentence of the grammar."""
        return self.runtime.matcher.accepts(self.state)


class Guides:
    """The engine's grammars at run time: the token table (built on first use) and one
    `GrammarRuntime` per grammar key (LRU), so masks and transitions are shared by every
    request with the same grammar."""

    def __init__(self, tokenizer, vocab_size: int, eos_ids, capacity: int = MAX_CACHED_RUNTIMES):
        self._tokenizer = tokenizer                     # None: a model without one (no grammar works)
        self._vocab_size, self._eos = vocab_size, frozenset(eos_ids)
        self._table: TokenTable | None = None
        self._runtimes: OrderedDict[str, GrammarRuntime] = OrderedDict()
        self.capacity = capacity

    def _encode(self, text: str) -> list[int]:
        """The model's own tokens for grammar-forced text (no special tokens parsed)."""
        return self._tokenizer.encode(text, parse_special=False)

    @property
    def table(self) -> TokenTable:
        if self._table is None:
            tok = self._tokenizer
            known = tok.vocab_size if tok is not None else 0
            self._table = build_table([_bytes_or_none(tok, i) if i < known else None
                                       for i in range(self._vocab_size)],
                                      tok.special_ids if tok is not None else (), self._eos)
        return self._table

    def constraint(self, grammar: Grammar) -> Constraint:
        runtime = self._runtimes.get(grammar.key)
        if runtime is None:
            runtime = self._runtimes[grammar.key] = GrammarRuntime(
                grammar, self.table, self._encode if self._tokenizer is not None else None)
            if len(self._runtimes) > self.capacity:
                self._runtimes.popitem(last=False)
        else:
            self._runtimes.move_to_end(grammar.key)
        return Constraint(runtime)


def _bytes_or_none(tokenizer, token_id: int) -> bytes | None:
    try:
        return tokenizer.token_bytes(token_id)
    except ValueError:                  # a hole in the id space (UnknownTokenIdError)
        return None
