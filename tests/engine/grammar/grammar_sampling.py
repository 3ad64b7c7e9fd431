"""Random sentences of a compiled grammar, for property tests: a walk over the automaton that
picks, at each state, one of the character sets an edge reads and a character from it
(ASCII when the set has some), and stops at an accepting state with probability `stop_p`.
Past `soft_chars` it prefers characters that close something (`"`, `}`, `]`) so a walk
through a loop ends; a walk that cannot end within `hard_chars` fails the test."""
from __future__ import annotations

import random

from engine.grammar import charset
from engine.grammar.automaton import DEAD, Grammar, Matcher

CLOSERS = '"}]'


def _pick_char(ranges: charset.Ranges, rng: random.Random) -> str:
    ascii_part = charset.intersect(ranges, ((0x20, 0x7E),))
    lo, hi = rng.choice(ascii_part or ranges)
    return chr(rng.randint(lo, min(hi, lo + 200)))


def sample_text(matcher: Matcher, rng: random.Random, *, stop_p: float = 0.3,
                soft_chars: int = 120, hard_chars: int = 5000) -> str:
    state, out = matcher.initial, []
    while True:
        if matcher.accepts(state) and (not matcher.can_continue(state) or rng.random() < stop_p
                                       or len(out) > soft_chars):
            return "".join(out)
        assert len(out) < hard_chars, "".join(out)[:300]
        sets = matcher.char_sets(state)
        assert sets, f"a dead end after {''.join(out)!r}"
        closing = [c for c in CLOSERS if any(charset.contains(r, ord(c)) for r in sets)]
        c = rng.choice(closing) if closing and len(out) > soft_chars else _pick_char(rng.choice(sets), rng)
        nxt = matcher.step_bytes(state, c.encode("utf-8"))
        assert nxt != DEAD, (c, "".join(out))
        state = nxt
        out.append(c)


def sample_texts(grammar: Grammar, count: int, seed: int = 0, **kwargs) -> list[str]:
    rng = random.Random(seed)
    matcher = Matcher(grammar)
    return [sample_text(matcher, rng, **kwargs) for _ in range(count)]


def accepts(grammar: Grammar, text: str) -> bool:
    matcher = Matcher(grammar)
    state = matcher.step_bytes(matcher.initial, text.encode("utf-8"))
    return state != DEAD and matcher.accepts(state)
