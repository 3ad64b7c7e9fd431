"""TextStream: token bytes in, text that is safe to send out (docs/CONTRACT.md).

Two things make streamed text hard:

1. **UTF-8 spans tokens.** A byte-level tokenizer may split one character across tokens
   (`😀` = `f0 9f | 98 | 80`). Bytes that are not yet a complete sequence wait in `P`
   (Python's incremental UTF-8 decoder holds them); an invalid sequence becomes U+FFFD,
   exactly as decoding the whole byte string with `errors="replace"` would.
2. **Stop strings span tokens.** With stop `"de"`, the text `"d"` may be the start of the
   stop string, so it must not be sent yet. We keep `T`, the decoded text not yet sent, and
   hold back its longest suffix that is a proper prefix of some stop string. When a stop
   string occurs in `T`, everything before its first occurrence is sent and the stream
   stops for good.

Invariant: the concatenation of everything `push` and `finish` return equals the text a
non-streamed answer would contain, so the streamed and plain paths share this class.

Sans-IO: no sockets, no engine; `push(bytes) -> str` and `finish() -> str`.
"""
from __future__ import annotations

import codecs


class TextStream:
    """Incremental UTF-8 decoding with stop-string hold-back for one generation."""

    __slots__ = ("_stops", "_decoder", "_held", "_stopped", "_max_stop_chars", "matched")

    def __init__(self, stops: list[str] | tuple[str, ...] = ()):
        self._stops = tuple(s for s in stops if s)          # an empty stop string means nothing
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""                                     # T: decoded, not yet sent
        self._stopped = False
        self.matched: str | None = None                     # the stop string that ended it
        self._max_stop_chars = max((len(s) for s in self._stops), default=0)

    def stopped(self) -> bool:
        """True once a stop string was found: nothing more will be sent."""
        return self._stopped

    def push(self, data: bytes) -> str:
        """Append one token's bytes; return the text that may be sent now (maybe "")."""
        if self._stopped:
            return ""
        self._held += self._decoder.decode(data, final=False)
        return self._release(final=False)

    def finish(self) -> str:
        """The generation ended: flush an incomplete UTF-8 tail (as U+FFFD) and held text."""
        if self._stopped:
            return ""
        self._held += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, *, final: bool) -> str:
        text = self._held
        cut = self._first_stop(text)
        if cut is not None:
            self._stopped = True
            self.matched = next(s for s in self._stops if text.find(s) == cut)
            self._held = ""
            return text[:cut]
        keep = 0 if final else self._held_back_chars(text)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def _first_stop(self, text: str) -> int | None:
        """Index of the earliest occurrence of any stop string in `text`, or None."""
        hits = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        return min(hits) if hits else None

    def _held_back_chars(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
        return partial_marker_chars(text, self._stops, self._max_stop_chars)


def partial_marker_chars(text: str, markers: tuple[str, ...],
                         max_marker_chars: int | None = None) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `markers`:
    what a stream holds back while a marker (a stop string, a closing tag, a tool-call
    trigger) may still be starting. `max_marker_chars`: the longest marker, if known."""
    if max_marker_chars is None:
        max_marker_chars = max((len(m) for m in markers), default=0)
    for size in range(min(len(text), max_marker_chars - 1), 0, -1):
        suffix = text[-size:]
        if any(m.startswith(suffix) for m in markers):
            return size
    return 0
