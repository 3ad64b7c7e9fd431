"""The pieces of JSON text as grammar expressions: whitespace, strings, numbers, literals.

Whitespace between two tokens is nothing, one space, or a newline and an indent of at most
`MAX_INDENT_CHARS` spaces or tabs: every layout json.dumps writes (compact, or `indent=2`
to depth 16), and nothing a model could pad forever (runs of tabs, blank lines);
strings write each character raw unless JSON needs an escape (`"`, `\\`, controls), and
`\\u` escapes are only offered for control characters, so every string decodes to valid
text. Numbers keep a bounded count of digits (`MAX_INT_DIGITS`, `MAX_FRACTION_DIGITS`,
`MAX_EXPONENT_DIGITS`): each one parses to a finite float. Numbers within bounds are
numbers.py's.
"""
from __future__ import annotations

import json

from engine.grammar import charset, expr as ex

MAX_INDENT_CHARS = 32           # spaces or tabs after a newline: indent=2 at depth 16
MAX_INT_DIGITS = 15
MAX_FRACTION_DIGITS = 15
MAX_EXPONENT_DIGITS = 2

WS = ex.alt(ex.EMPTY, ex.lit(" "),
            ex.seq(ex.lit("\n"), ex.rep(ex.chars(charset.chars(" \t")), 0, MAX_INDENT_CHARS)))
_SPECIAL = charset.union(charset.chars('"\\'), ((0, 0x1F),))
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r",
                  "\b": "\\b", "\f": "\\f"}
DIGIT = ex.chars(charset.DIGITS)
NONZERO = ex.chars(((0x31, 0x39),))


def escaped(cp: int) -> str:
    c = chr(cp)
    return _SHORT_ESCAPES.get(c, "\\u%04x" % cp)


def json_chars(ranges: charset.Ranges) -> tuple:
    """One string character from `ranges`, written as JSON writes it inside quotes.

    Of the control characters only newline and tab are offered (as `\\n`, `\\t`): a subset
    of the set, so the text stays valid and the automaton small."""
    parts = []
    raw = charset.minus(ranges, _SPECIAL)
    if raw:
        parts.append(ex.chars(raw))
    for c in '"\\\n\t':
        if charset.contains(ranges, ord(c)):
            parts.append(ex.lit(escaped(ord(c))))
    return ex.alt(*parts) if parts else ex.chars(())


HEX = ex.chars(charset.chars("0123456789abcdefABCDEF"))
# Any character: raw, a short escape, or a \u escape of a control character.
STRING_CHAR = ex.alt(ex.chars(charset.minus(charset.ANY, _SPECIAL)),
                     ex.seq(ex.lit("\\"), ex.alt(ex.chars(charset.chars('"\\/bfnrt')),
                                                 ex.seq(ex.lit("u00"), ex.chars(charset.chars("01")), HEX))))


def string(min_len: int = 0, max_len: int | None = None) -> tuple:
    return ex.seq(ex.lit('"'), ex.rep(STRING_CHAR, min_len, max_len), ex.lit('"'))


def literal(value) -> tuple:
    return ex.lit(json.dumps(value, ensure_ascii=False))


INTEGER = ex.seq(ex.opt(ex.lit("-")), ex.alt(ex.lit("0"), ex.seq(NONZERO, ex.rep(DIGIT, 0, MAX_INT_DIGITS - 1))))
NUMBER = ex.seq(INTEGER,
                ex.opt(ex.seq(ex.lit("."), ex.rep(DIGIT, 1, MAX_FRACTION_DIGITS))),
                ex.opt(ex.seq(ex.chars(charset.chars("eE")), ex.opt(ex.chars(charset.chars("+-"))),
                              ex.rep(DIGIT, 1, MAX_EXPONENT_DIGITS))))
