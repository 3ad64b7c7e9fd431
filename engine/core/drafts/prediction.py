"""Prediction drafts: the request's predicted output (OpenAI's `prediction`), followed by a cursor.

"Rewrite this file with one change": most of the answer repeats the prediction, so it is
the best draft there is. `PredictionTrack` keeps a cursor into the prediction: the index
of the token the output is expected to produce next. Every produced token that equals
`prediction[cursor]` advances it (whoever drafted it); the first that does not loses the
alignment. Drafting while aligned is `prediction[cursor:cursor + k]` -- at the output's
start, the prediction's first k tokens.

Re-alignment after a divergence (the one changed line): the context's last tokens are
looked up in the prediction -- the positions where its last `REALIGN_KEY_TOKENS` tokens
occur (an index built once), each measured back up to `REALIGN_MAX_TOKENS` -- and the
cursor moves after the longest agreement, preferring one at or after the old cursor (the
edit went on forward), then the nearest. Until the context agrees again, no drafts.
"""
from __future__ import annotations

from engine.core.drafts.lookup import agreement

REALIGN_KEY_TOKENS = 3            # the shortest agreement that re-aligns the cursor
REALIGN_MAX_TOKENS = 16           # agreement measured up to this far back


class PredictionTrack:
    """One request's cursor into its prediction (engine thread only)."""
    __slots__ = ("prediction", "cursor", "aligned", "followed", "_index", "_tried_at")

    def __init__(self, prediction: tuple[int, ...]):
        self.prediction = prediction
        self.cursor = 0                 # prediction[cursor] is the expected next token
        self.aligned = True
        self.followed = 0               # output tokens seen so far
        self._index: dict[tuple[int, ...], list[int]] | None = None   # key -> end positions, ascending
        self._tried_at = -1             # context length of the last failed re-alignment

    def follow(self, output: list[int]) -> None:
        """Advance over the output tokens produced since the last call."""
        for token in output[self.followed:]:
            if self.aligned and self.cursor < len(self.prediction) and self.prediction[self.cursor] == token:
                self.cursor += 1
            else:
                self.aligned = False
        self.followed = len(output)

    def propose(self, context: list[int], max_tokens: int) -> list[int]:
        """Up to `max_tokens` predicted tokens after the cursor ([] while not aligned)."""
        if max_tokens <= 0:
            return []
        if not self.aligned and self._tried_at != len(context):
            self._realign(context)
        if not self.aligned:
            return []
        return list(self.prediction[self.cursor:self.cursor + max_tokens])

    def _realign(self, context: list[int]) -> None:
        self._tried_at = len(context)
        if len(context) < REALIGN_KEY_TOKENS:
            return
        best: tuple[int, bool, int] | None = None        # (agreement, at/after cursor, -distance)
        best_cursor = 0
        for end in self._positions().get(tuple(context[-REALIGN_KEY_TOKENS:]), ()):
            cursor = end + 1
            if cursor >= len(self.prediction):
                continue                                  # nothing left to draft after it
            rank = (self._agreement(context, end), cursor >= self.cursor, -abs(cursor - self.cursor))
            if best is None or rank > best:
                best, best_cursor = rank, cursor
        if best is not None:
            self.cursor, self.aligned = best_cursor, True

    def _agreement(self, context: list[int], end: int) -> int:
        limit = min(REALIGN_MAX_TOKENS, len(context), end + 1)
        return agreement(self.prediction.__getitem__, end, context, limit)

    def _positions(self) -> dict[tuple[int, ...], list[int]]:
        if self._index is None:
            self._index = {}
            k = REALIGN_KEY_TOKENS
            for end in range(k - 1, len(self.prediction)):
                self._index.setdefault(tuple(self.prediction[end - k + 1:end + 1]), []).append(end)
        return self._index
