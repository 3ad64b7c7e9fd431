"""Byte-pair merging inside one pre-token word: the heart of BPE.

A word starts as one symbol per byte (in the byte-level alphabet, so " world" is the
symbols "Ġ w o r l d"). The merge list ranks pairs of symbols; rank 0 was learned first.
Repeatedly, the adjacent pair with the lowest rank is fused into one symbol, and among equal
ranks (which can only be the same pair twice) the leftmost goes first. When no adjacent pair
has a rank the word is done, and each remaining symbol is a vocabulary entry:

    Ġ w o r l d  -> (Ġ,w) rank 15  -> Ġw o r l d -> ... -> Ġworld     (one token, id 905)

This is exactly Hugging Face's order (a priority queue on (rank, position)). Two routines
compute it: a plain rescan for short words (fast in Python for the usual 2-10 symbols) and a
heap over a linked list for long words, so a 100 KB word without spaces costs
O(n log n), not O(n^2). A test checks that the two agree.

`WordEncoder` adds the per-word cache: most text repeats a small set of words, so after a
warm-up nearly every word is one dict lookup.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable

from engine.tokenizer.bytes_unicode import text_to_byte_chars

# Words with more symbols than this use the heap; below, rescanning all pairs is cheaper.
MAX_SYMBOLS_FOR_RESCAN = 48
# The word cache is a plain dict, emptied when it reaches this many words (bounded memory:
# roughly 64k short strings and id lists, a few MB).
MAX_CACHED_WORDS = 1 << 16
# Words longer than this many characters are not cached (a long one-off blob would only
# displace useful entries).
MAX_CACHED_WORD_CHARS = 256

Pair = tuple[str, str]


class PairRanks:
    """Merge ranks without a merge list (SentencePiece, GGUF `tokenizer.ggml.scores`): the
    pair (left, right) may merge when left + right is a piece in `rank_of`, and merges
    before pairs whose piece has a larger rank. Quacks like the rank dict for the routines
    below (`get`, `in`, `[]`)."""

    __slots__ = ("_rank_of",)

    def __init__(self, rank_of: dict[str, int]) -> None:
        self._rank_of = rank_of

    def get(self, pair: Pair, default: int | None = None) -> int | None:
        return self._rank_of.get(pair[0] + pair[1], default)

    def __contains__(self, pair: Pair) -> bool:
        return pair[0] + pair[1] in self._rank_of

    def __getitem__(self, pair: Pair) -> int:
        return self._rank_of[pair[0] + pair[1]]


# Either a merge list's ranks or a PairRanks (both answer get / in / []).
Ranks = dict[Pair, int] | PairRanks


def merge_rescan(symbols: list[str], ranks: Ranks) -> list[str]:
    """Apply merges to `symbols` (modified in place and returned) by rescanning the pairs."""
    while len(symbols) > 1:
        best_rank = -1
        best_at = -1
        for at in range(len(symbols) - 1):
            rank = ranks.get((symbols[at], symbols[at + 1]))
            if rank is not None and (best_rank < 0 or rank < best_rank):
                best_rank, best_at = rank, at
        if best_at < 0:
            break
        symbols[best_at:best_at + 2] = [symbols[best_at] + symbols[best_at + 1]]
    return symbols


def merge_heap(symbols: list[str], ranks: Ranks) -> list[str]:
    """The same result as `merge_rescan`, in O(n log n): a heap of (rank, position) over a
    doubly linked list of live symbols. Stale heap entries are skipped when popped."""
    count = len(symbols)
    merged: list[str | None] = list(symbols)
    next_at = list(range(1, count + 1))   # count means "no next symbol"
    prev_at = list(range(-1, count - 1))  # -1 means "no previous symbol"
    heap = [(ranks[pair], at) for at, pair in enumerate(zip(symbols, symbols[1:]))
            if pair in ranks]
    heapq.heapify(heap)
    while heap:
        rank, at = heapq.heappop(heap)
        right = next_at[at]
        left_symbol = merged[at]
        if left_symbol is None or right >= count:
            continue
        if ranks.get((left_symbol, merged[right])) != rank:  # type: ignore[arg-type]
            continue  # this pair changed since the entry was pushed
        fused = left_symbol + merged[right]  # type: ignore[operator]
        merged[at], merged[right] = fused, None
        after = next_at[right]
        next_at[at] = after
        if after < count:
            prev_at[after] = at
            _push_pair(heap, ranks, fused, merged[after], at)  # type: ignore[arg-type]
        before = prev_at[at]
        if before >= 0:
            _push_pair(heap, ranks, merged[before], fused, before)  # type: ignore[arg-type]
    return [s for s in merged if s is not None]


def _push_pair(heap: list, ranks: Ranks, left: str, right: str, at: int) -> None:
    rank = ranks.get((left, right))
    if rank is not None:
        heapq.heappush(heap, (rank, at))


class WordEncoder:
    """Pre-token word (plain text) -> token ids, with merges by rank and a bounded cache."""

    __slots__ = ("_vocab", "_ranks", "_ignore_merges", "_cache")

    def __init__(self, vocab: dict[str, int], merges: Iterable[Pair] | PairRanks, *,
                 ignore_merges: bool = False) -> None:
        self._vocab = vocab
        if isinstance(merges, PairRanks):
            self._ranks = merges
        else:
            self._ranks = {}
            for rank, pair in enumerate(merges):
                self._ranks.setdefault(pair, rank)  # a repeated pair keeps its first rank
        self._ignore_merges = ignore_merges
        self._cache: dict[str, list[int]] = {}

    def encode_words(self, words: Iterable[str]) -> list[int]:
        """The ids of the words, in order (each word's ids cached)."""
        ids: list[int] = []
        cache = self._cache
        for word in words:
            word_ids = cache.get(word)
            if word_ids is None:
                word_ids = self.encode_word(word)
                if len(word) <= MAX_CACHED_WORD_CHARS:
                    if len(cache) >= MAX_CACHED_WORDS:
                        cache.clear()
                    cache[word] = word_ids
            ids.extend(word_ids)
        return ids

    def encode_word(self, word: str) -> list[int]:
        """The ids of one pre-token word (no cache)."""
        chars = self._symbols_of(word)
        vocab = self._vocab
        if self._ignore_merges and chars in vocab:
            return [vocab[chars]]
        merge = merge_rescan if len(chars) <= MAX_SYMBOLS_FOR_RESCAN else merge_heap
        return self._ids_of(merge(list(chars), self._ranks))

    def _symbols_of(self, word: str) -> str:
        """The word as the string of its first symbols (here: byte-level characters)."""
        return text_to_byte_chars(word)

    def _ids_of(self, symbols: list[str]) -> list[int]:
        """The ids of the merged symbols. A symbol outside the vocabulary (a byte the
        vocabulary never saw) is dropped, as Hugging Face's BPE does when it has neither an
        unknown token nor byte fallback."""
        vocab = self._vocab
        return [vocab[s] for s in symbols if s in vocab]
