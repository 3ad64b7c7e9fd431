"""The vocabulary as a sorted table of token bytes: the trie the mask walks.

A trie of 49k tokens as Python objects would cost tens of MB; the same walk works over the
tokens sorted by their bytes plus, for each, the length of the prefix it shares with the
previous one (`lcp`). `allowed_tokens` keeps the automaton state after each byte of the
current path (`path[d]` = state after d bytes), restarts each token at its shared prefix,
and skips every token that shares a prefix the automaton already refused. Special tokens
are not in the table (a grammar never writes "<|im_end|>"); EOS is decided separately by
whether the automaton accepts. The engine builds its masks from the same entries as a trie
by depth (trie.py, walked with numpy by dense.py); `allowed_tokens` stays the per-token
reference that walk is tested against (and the fallback past dense.MAX_DENSE_STATES).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.grammar.automaton import DEAD, Matcher
from engine.grammar.trie import VocabTrie, build_trie


@dataclass(frozen=True, eq=False)
class TokenTable:
    vocab_size: int
    token_bytes: tuple[bytes | None, ...]       # [V] id -> bytes; None: never allowed by a grammar
    sorted_bytes: tuple[bytes, ...]             # [N] the allowed tokens' bytes, sorted
    sorted_ids: np.ndarray                      # [N] int32 ids in that order
    lcp: np.ndarray                             # [N] int32 prefix shared with the previous entry
    eos_ids: frozenset[int]
    trie: VocabTrie                             # the same entries as a trie by depth (dense.py walks it)
    quote_ids: np.ndarray                       # [Q] int32 ids of the tokens with a `"` (keys.py)

    def nbytes(self) -> int:
        """Memory held by the table and its trie (bytes objects at their payload + header)."""
        payload = sum(len(b) + 33 for b in self.sorted_bytes)     # CPython bytes header ~33
        return (payload + self.sorted_ids.nbytes + self.lcp.nbytes + 8 * len(self.token_bytes)
                + self.trie.nbytes())


def build_table(token_bytes: list[bytes | None], special_ids, eos_ids) -> TokenTable:
    """Token bytes by id -> the sorted table (special and empty tokens left out)."""
    kept = [None if (i in special_ids or i in eos_ids or not b) else b
            for i, b in enumerate(token_bytes)]
    order = sorted((b, i) for i, b in enumerate(kept) if b is not None)
    data = tuple(b for b, _ in order)
    lcp = np.zeros(len(data), dtype=np.int32)
    for k in range(1, len(data)):
        a, b = data[k - 1], data[k]
        n = min(len(a), len(b))
        j = 0
        while j < n and a[j] == b[j]:
            j += 1
        lcp[k] = j
    return TokenTable(len(token_bytes), tuple(kept), data,
                      np.array([i for _, i in order], dtype=np.int32), lcp, frozenset(eos_ids),
                      build_trie(data, lcp),
                      np.array([i for i, b in enumerate(kept) if b is not None and b'"' in b],
                               dtype=np.int32))


def allowed_tokens(table: TokenTable, matcher: Matcher, state: int) -> np.ndarray:
    """bool [V]: the tokens whose bytes the automaton accepts from `state` (EOS: if it accepts).
    The per-token reference walk; the engine builds the same mask with dense.trie_mask."""
    mask = np.zeros(table.vocab_size, dtype=bool)
    ok = np.zeros(len(table.sorted_bytes), dtype=bool)             # [N] in sorted order
    path = [state]
    dead_at = None                                                 # depth of a refused prefix
    step, data, lcp = matcher.step, table.sorted_bytes, table.lcp.tolist()
    for k, tok in enumerate(data):
        shared = lcp[k]
        if dead_at is not None:
            if shared >= dead_at:
                continue
            dead_at = None
        del path[shared + 1:]
        s = path[shared]
        for d in range(shared, len(tok)):
            s = step(s, tok[d])
            if s == DEAD:
                dead_at = d + 1
                break
            path.append(s)
        else:
            ok[k] = True
    mask[table.sorted_ids[ok]] = True
    if matcher.accepts(state):
        mask[list(table.eos_ids)] = True
    return mask
