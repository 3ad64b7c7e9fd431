"""Suffix drafts (the SuffixDecoding idea): continue the context the way earlier text did.

Agent loops, extraction and chat templates repeat what the server produced before: the
same tool call with new arguments, the same JSON keys, the same template lines. The store
keeps the most recent `SUFFIX_STORE_TOKENS` tokens of finished requests (prompt + output,
one document each, documents separated by a boundary) in a ring, and an index from every
`SUFFIX_KEY_TOKENS`-gram to the ring positions where it ends (oldest first). To draft for
a context, `propose` takes the positions of the context's last key (the most recent
`SUFFIX_MAX_CANDIDATES`), measures how far back each one agrees with the context (up to
`SUFFIX_MAX_MATCH_TOKENS`), and continues after the LONGEST agreement (the most recent
among equals), up to the end of that document.

Bounded by construction: the ring has a fixed size, and writing a token over the oldest
one first removes the index entry that ended there, so the index never holds more than
the ring's tokens. Per step a sequence costs one dict lookup and at most
`SUFFIX_MAX_CANDIDATES * SUFFIX_MAX_MATCH_TOKENS` token comparisons.

Scoped: every document is stored under its request's cache scope (`engine.types.
CacheScope`: LoRA adapter and tenant salt), the index keys include the scope, and a
candidate is kept only where its document's scope equals the context's, so one tenant's
answers never draft another's (a drafted answer is a timing side channel).

What it is not: a suffix tree with frequency counts (the paper's); the ring + n-gram index
answers the same question, longest suffix match, with a few lines and a hard memory bound.
"""
from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Hashable

from engine.core.drafts.lookup import agreement
from engine.types import BASE_SCOPE

SUFFIX_STORE_TOKENS = 262_144      # ring size: the most recent tokens kept (~2 MiB of ids + index)
SUFFIX_KEY_TOKENS = 3              # the shortest agreement that may draft (the index key length)
SUFFIX_MAX_MATCH_TOKENS = 32       # agreement measured up to this far back
SUFFIX_MAX_CANDIDATES = 8          # most recent occurrences of the key examined per proposal
SUFFIX_MAX_DOCUMENT_TOKENS = SUFFIX_STORE_TOKENS // 4   # one request's tail kept, at most
BOUNDARY = -1                      # between documents: no match or continuation crosses it


class SuffixStore:
    """The ring of recent tokens and its n-gram index (engine thread only)."""

    def __init__(self, capacity_tokens: int = SUFFIX_STORE_TOKENS):
        self.capacity_tokens = capacity_tokens
        self._ring: list[int] = [BOUNDARY] * capacity_tokens     # [capacity]: token at pos % capacity
        self._keys: list[int | None] = [None] * capacity_tokens  # [capacity]: the key ending there
        self._scopes: list[Hashable] = [BASE_SCOPE] * capacity_tokens   # [capacity]: its document's scope
        self._index: dict[int, deque[int]] = {}                  # key -> absolute end positions, oldest first
        self._written = 0                                        # tokens ever written (absolute position)

    def add(self, tokens, scope: Hashable = BASE_SCOPE) -> None:
        """One finished document (a request's prompt + output), its last part if long,
        drafting only for contexts of the same `scope`."""
        self._put(BOUNDARY, None, scope)
        tag = hash(scope)                        # once per document: the index keys carry it
        limit = min(SUFFIX_MAX_DOCUMENT_TOKENS, self.capacity_tokens - 1)
        window: tuple[int, ...] = ()             # the last SUFFIX_KEY_TOKENS of this document
        for token in list(tokens)[-limit:]:
            window = (window + (int(token),))[-SUFFIX_KEY_TOKENS:]
            key = hash((tag, window)) if len(window) == SUFFIX_KEY_TOKENS else None
            self._put(window[-1], key, scope)

    def propose(self, context: list[int], max_tokens: int,
                scope: Hashable = BASE_SCOPE) -> list[int]:
        """Up to `max_tokens` that followed the longest earlier agreement with `context`'s
        end, in a document of the same `scope`."""
        if max_tokens <= 0 or len(context) < SUFFIX_KEY_TOKENS:
            return []
        positions = self._index.get(hash((hash(scope), tuple(context[-SUFFIX_KEY_TOKENS:]))))
        if not positions:
            return []
        best_len, best_end = 0, -1
        for end in islice(reversed(positions), SUFFIX_MAX_CANDIDATES):    # most recent first
            if self._scopes[end % self.capacity_tokens] != scope:
                continue                                                  # a hash collision across scopes
            if self._at(end + 1) == BOUNDARY:
                continue                                                  # nothing follows it
            agreed = self._agreement(context, end)
            if agreed > best_len:
                best_len, best_end = agreed, end
        if best_len < SUFFIX_KEY_TOKENS:          # a hash collision, not a match
            return []
        draft: list[int] = []
        pos = best_end + 1
        while len(draft) < max_tokens and (token := self._at(pos)) != BOUNDARY:
            draft.append(token)
            pos += 1
        return draft

    # -- the ring --------------------------------------------------------------------------

    def _at(self, pos: int) -> int:
        """The token at absolute position `pos`, BOUNDARY outside what the ring still holds."""
        if pos >= self._written or pos < self._written - self.capacity_tokens:
            return BOUNDARY
        return self._ring[pos % self.capacity_tokens]

    def _agreement(self, context: list[int], end: int) -> int:
        """How many of context's last tokens equal the ring's tokens ending at `end`."""
        return agreement(self._at, end, context, min(SUFFIX_MAX_MATCH_TOKENS, len(context)))

    def _put(self, token: int, key: int | None, scope: Hashable) -> None:
        """Write `token` of a `scope` document over the oldest one; `key`: that of the gram
        it ends (None: none)."""
        pos = self._written
        slot = pos % self.capacity_tokens
        old_key = self._keys[slot]
        if old_key is not None:                   # forget the entry that ended in this slot
            old = self._index[old_key]
            old.popleft()                         # it is the oldest of its key
            if not old:
                del self._index[old_key]
        self._ring[slot] = token
        self._written += 1
        self._keys[slot] = key
        self._scopes[slot] = scope
        if key is not None:
            self._index.setdefault(key, deque()).append(pos)
