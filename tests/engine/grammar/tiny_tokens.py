"""A tiny longest-match tokenizer over a few JSON pieces, and a grammar runtime and cursor
built on it: what the constraint tests of the grammar share."""
from __future__ import annotations

from engine.grammar.automaton import DEAD
from engine.grammar.compile import GrammarCache, GrammarSpec
from engine.grammar.constraint import Constraint, GrammarRuntime
from engine.grammar.vocab import build_table

PIECES = ['{"', '"', '":', '",', '"}', ' "', ": ", ",", ":", " ", "}", "}}", "{", "[", "]",
          "a", "b", "c", "x", "k", "s", "ius", "els", "unit", "name", "abc", "1", "2", "-"]

class TinyTokenizer:
    """Longest match over PIECES plus every single byte; EOS is the last id."""

    def __init__(self, pieces=PIECES, space_prefix: bool = False):
        self.vocab = [bytes([b]) for b in range(256)] + [p.encode() for p in pieces] + [b"<eos>"]
        self.eos = len(self.vocab) - 1
        self.space_prefix = space_prefix        # SentencePiece-like: a space before the text
        self._ids = {b: i for i, b in enumerate(self.vocab[:-1])}

    def encode(self, text: str) -> list[int]:
        data = (" " + text if self.space_prefix else text).encode()
        out, i = [], 0
        while i < len(data):
            n = max(n for n in range(1, len(data) - i + 1) if data[i:i + n] in self._ids)
            out.append(self._ids[data[i:i + n]])
            i += n
        return out

    def decode(self, ids) -> str:
        return b"".join(self.vocab[i] for i in ids).decode()


def runtime_for(spec: GrammarSpec, tok: TinyTokenizer) -> GrammarRuntime:
    table = build_table(tok.vocab, special_ids=set(), eos_ids={tok.eos})
    return GrammarRuntime(GrammarCache().get(spec), table, tok.encode)


def at(runtime: GrammarRuntime, text: str) -> Constraint:
    """A constraint after `text` (written byte by byte, as any tokens would leave it)."""
    c = Constraint(runtime)
    for b in text.encode():
        c.advance(b)
    assert c.state != DEAD and not c.finished
    return c
