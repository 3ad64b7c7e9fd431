"""The pieces of JSON text as grammar expressions: whitespace, strings, numbers, literals.

Whitespace between tokens is bounded (`MAX_WS_CHARS`) so a model cannot indent forever;
strings write each character raw unless JSON needs an escape (`"`, `\\`, controls), and
`\\u` escapes are only offered for control characters, so every string decodes to valid
text. Numbers keep a bounded count of digits (`MAX_INT_DIGITS`, `MAX_FRACTION_DIGITS`,
`MAX_EXPONENT_DIGITS`): each one parses to a finite float. `int_range` writes the integers
of an interval as a digit-by-digit alternation (the grammar holds `minimum`/`maximum`).
"""
from __future__ import annotations

import json

from engine.grammar import charset, expr as ex

MAX_WS_CHARS = 8                # whitespace characters between two JSON tokens
MAX_INT_DIGITS = 15
MAX_FRACTION_DIGITS = 15
MAX_EXPONENT_DIGITS = 2

WS = ex.rep(ex.chars(charset.chars(" \n\t")), 0, MAX_WS_CHARS)
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


def _same_length(a: str, b: str) -> tuple:
    """Digit strings of len(a) == len(b) between a and b inclusive."""
    if a == b:
        return ex.lit(a)
    if len(a) == 1:
        return ex.chars(((ord(a), ord(b)),))
    if a[0] == b[0]:
        return ex.seq(ex.lit(a[0]), _same_length(a[1:], b[1:]))
    n = len(a) - 1
    parts = [ex.seq(ex.lit(a[0]), _same_length(a[1:], "9" * n))]
    if int(b[0]) - int(a[0]) > 1:
        parts.append(ex.seq(ex.chars(((ord(a[0]) + 1, ord(b[0]) - 1),)), ex.rep(DIGIT, n, n)))
    parts.append(ex.seq(ex.lit(b[0]), _same_length("0" * n, b[1:])))
    return ex.alt(*parts)


def _natural_range(lo: int, hi: int | None) -> tuple:
    """Decimal integers lo..hi (0 <= lo; hi None: unbounded), no leading zeros."""
    top = hi if hi is not None else 10 ** max(len(str(lo)), 1) - 1
    parts = []
    for d in range(len(str(lo)), len(str(top)) + 1):
        a, b = max(lo, 10 ** (d - 1) if d > 1 else 0), min(top, 10 ** d - 1)
        if a <= b:
            parts.append(_same_length(str(a), str(b)))
    if hi is None and len(str(top)) < MAX_INT_DIGITS:
        parts.append(ex.seq(NONZERO, ex.rep(DIGIT, len(str(top)), MAX_INT_DIGITS - 1)))
    return ex.alt(*parts)


def int_range(lo: int | None, hi: int | None) -> tuple:
    """Integers in [lo, hi] (None: unbounded on that side); the caller checks lo <= hi."""
    parts = []
    if hi is None or hi >= 0:
        parts.append(_natural_range(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        neg_lo = 1 if hi is None or hi >= 0 else -hi
        parts.append(ex.seq(ex.lit("-"), _natural_range(neg_lo, None if lo is None else -lo)))
    return ex.alt(*parts)
