"""Numbers within bounds as grammar expressions: integers of an interval, decimals of an
interval, and integer multiples.

Digit ranges are linear in the number of digits. Strings of one length that are >= a bound
are, digit by digit, "this digit is larger, then any digits" or "this digit equals the
bound's, then the same question for the rest"; <= likewise. Any-digits tails are shared
named rules (`digits.N` = one digit then a tail call of `digits.N-1`), so a bound of D digits
costs O(D) expression nodes and O(D) automaton states, and a range of two bounds follows
their common prefix and splits once. Bounds as large as Zod's +-(2^53-1) compile in
milliseconds.

A bounded `number` is written as an integer part and an optional fraction, no exponent, at
most `MAX_SIGNIFICANT_DIGITS` digits in all, so every text parses to the nearest double
without ambiguity: two different texts of at most 15 digits are two different doubles, in
the same order. Bounds are read as their shortest decimal text (`repr`) and, when that
needs more than 15 significant digits, rounded inward and made inclusive (the rounded
value is a different double, strictly inside). So the language is a subset of the numbers
the bounds allow, never more, and it includes fractions (0.5 in [0, 1]). Integer `multipleOf`
lists the multiples inside the bounds, at most `MAX_LISTED_MULTIPLES` of them, the ones
nearest zero (a subset again).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

from engine.grammar import expr as ex
from engine.grammar.budget import WorkBudget
from engine.grammar.jsontext import DIGIT, MAX_INT_DIGITS, NONZERO

MAX_SIGNIFICANT_DIGITS = 15     # digits of a bounded number's text (a double keeps 15 exactly)
MAX_LISTED_MULTIPLES = 1000     # integer multiples written out for `multipleOf`
DIGIT_WORK = 8                  # budget units per digit of a bound handled


@dataclass(frozen=True)
class Bound:
    value: Decimal
    strict: bool                # exclusive: the value itself is not allowed


def _digit_set(lo: str, hi: str) -> tuple:
    return ex.chars(((ord(lo), ord(hi)),))


def _alt(*parts) -> tuple | None:
    """An alternation of the parts that are not None (an empty language); None if none is."""
    live = [p for p in parts if p is not None]
    return ex.alt(*live) if live else None


def _then(head: tuple, tail: tuple | None) -> tuple | None:
    return None if tail is None else ex.seq(head, tail)


def _is_zero(digits: str) -> bool:
    return not digits.strip("0")


def _fraction_digits(value: Decimal) -> str:
    """The digits after the point of a non-negative value, without trailing zeros."""
    text = format(value - int(value), "f")
    return text.partition(".")[2].rstrip("0")


class NumberBuilder:
    """Builds number expressions into a schema's `rules` (the shared digit tails go there)."""

    def __init__(self, rules: dict[str, tuple], budget: WorkBudget):
        self.rules = rules
        self.budget = budget

    def any_digits(self, n: int) -> tuple:
        """Exactly n digits: a call of the shared `digits.n` rule."""
        if n == 0:
            return ex.EMPTY
        for i in range(1, n + 1):
            name = f"digits.{i}"
            if name not in self.rules:
                self.budget.spend(DIGIT_WORK)
                self.rules[name] = ex.seq(DIGIT, self.any_digits(i - 1)) if i > 1 else DIGIT
        return ex.ref(f"digits.{n}")

    # -- integers
    def _at_least(self, a: str) -> tuple:
        """Digit strings of len(a) that are >= a."""
        e = ex.EMPTY
        for i in reversed(range(len(a))):
            self.budget.spend(DIGIT_WORK)
            rest = len(a) - i - 1
            larger = ex.seq(_digit_set(chr(ord(a[i]) + 1), "9"), self.any_digits(rest)) if a[i] < "9" else None
            e = _alt(ex.seq(ex.lit(a[i]), e), larger)
        return e

    def _at_most(self, b: str, lowest_first: str) -> tuple:
        """Digit strings of len(b) that are <= b, the first digit at least `lowest_first`."""
        e = ex.EMPTY
        for i in reversed(range(len(b))):
            self.budget.spend(DIGIT_WORK)
            low = lowest_first if i == 0 else "0"
            smaller = ex.seq(_digit_set(low, chr(ord(b[i]) - 1)), self.any_digits(len(b) - i - 1)) \
                if b[i] > low else None
            e = _alt(ex.seq(ex.lit(b[i]), e), smaller)
        return e

    def _same_length(self, a: str, b: str) -> tuple:
        """Digit strings of one length between a and b (a <= b) inclusive: common prefix, one split."""
        common = 0
        while common < len(a) and a[common] == b[common]:
            common += 1
        self.budget.spend(DIGIT_WORK * (common + 1))
        if common == len(a):
            return ex.lit(a)
        head, a_rest, b_rest = a[:common], a[common + 1:], b[common + 1:]
        lo_d, hi_d = a[common], b[common]
        parts = [ex.seq(ex.lit(lo_d), self._at_least(a_rest)) if a_rest else ex.lit(lo_d)]
        if ord(hi_d) - ord(lo_d) > 1:
            parts.append(ex.seq(_digit_set(chr(ord(lo_d) + 1), chr(ord(hi_d) - 1)), self.any_digits(len(a_rest))))
        parts.append(ex.seq(ex.lit(hi_d), self._at_most(b_rest, "0")) if b_rest else ex.lit(hi_d))
        return ex.seq(ex.lit(head), ex.alt(*parts))

    def natural_range(self, lo: int, hi: int | None) -> tuple | None:
        """Decimal integers lo..hi (0 <= lo; hi None: up to MAX_INT_DIGITS digits), no leading zeros."""
        top = 10 ** max(MAX_INT_DIGITS, len(str(lo))) - 1
        top = top if hi is None else min(hi, top)
        if lo > top:
            return None
        a, b = str(lo), str(top)
        if len(a) == len(b):
            return self._same_length(a, b)
        parts = [self._at_least(a)]
        if len(b) - len(a) >= 2:                        # every length in between: any such number
            parts.append(ex.seq(NONZERO, ex.alt(*(self.any_digits(n) for n in range(len(a), len(b) - 1)))))
        parts.append(self._at_most(b, "1"))
        return ex.alt(*parts)

    def int_range(self, lo: int | None, hi: int | None) -> tuple | None:
        """Integers in [lo, hi] (None: unbounded on that side); None when there is none."""
        if lo is not None and hi is not None and lo > hi:
            return None
        positive = self.natural_range(max(lo, 0) if lo is not None else 0, hi) if hi is None or hi >= 0 else None
        negative = None
        if lo is None or lo < 0:
            magnitudes = self.natural_range(1 if hi is None or hi >= 0 else -hi, None if lo is None else -lo)
            negative = _then(ex.lit("-"), magnitudes)
        return _alt(positive, negative)

    # -- decimals
    def decimal_range(self, lo: Bound | None, hi: Bound | None) -> tuple | None:
        """Numbers (integer part, optional fraction) inside the bounds; None when there is none."""
        lo, hi = _inward(lo, ROUND_CEILING), _inward(hi, ROUND_FLOOR)
        positive = negative = None
        if hi is None or hi.value > 0 or (hi.value == 0 and not hi.strict):
            start = lo if lo is not None and lo.value >= 0 else Bound(Decimal(0), False)
            positive = self._unsigned(start, hi)
        if lo is None or lo.value < 0:                  # magnitudes > 0 only: no "-0"
            start = Bound(-hi.value, hi.strict) if hi is not None and hi.value < 0 else Bound(Decimal(0), True)
            negative = _then(ex.lit("-"), self._unsigned(start, None if lo is None else Bound(-lo.value, lo.strict)))
        return _alt(positive, negative)

    def _unsigned(self, lo: Bound, hi: Bound | None) -> tuple | None:
        if hi is not None and (lo.value > hi.value or (lo.value == hi.value and (lo.strict or hi.strict))):
            return None
        n_lo, a = int(lo.value), _fraction_digits(lo.value)
        if hi is not None and len(str(int(hi.value))) > max(MAX_INT_DIGITS, len(str(n_lo))):
            hi = None                                   # every number the digit cap allows is below it
        if hi is not None and int(hi.value) == n_lo:
            return _then(ex.lit(str(n_lo)), self._between(a, lo.strict, _fraction_digits(hi.value), hi.strict,
                                                          _room(n_lo)))
        parts = [_then(ex.lit(str(n_lo)), self._fraction(self._at_least_frac(a, lo.strict, _room(n_lo), 1),
                                                         empty=_is_zero(a) and not lo.strict))]
        n_hi = None if hi is None else int(hi.value)
        top_digits = max(MAX_INT_DIGITS, len(str(n_lo))) if n_hi is None else len(str(n_hi - 1))
        for d in range(len(str(n_lo + 1)), top_digits + 1):        # whole integer parts, by length
            first, last = max(n_lo + 1, 10 ** (d - 1)), 10 ** d - 1 if n_hi is None else min(n_hi - 1, 10 ** d - 1)
            if first <= last:
                fraction = ex.opt(ex.seq(ex.lit("."), ex.rep(DIGIT, 1, _room(first)))) if _room(first) else ex.EMPTY
                parts.append(ex.seq(self._same_length(str(first), str(last)), fraction))
        if hi is not None:
            b = _fraction_digits(hi.value)
            parts.append(_then(ex.lit(str(n_hi)), self._fraction(self._at_most_frac(b, hi.strict, _room(n_hi), 1),
                                                                 empty=not (_is_zero(b) and hi.strict))))
        return _alt(*parts)

    @staticmethod
    def _fraction(digits: tuple | None, *, empty: bool = False) -> tuple | None:
        """The fraction's text: "." and the digits, or nothing at all when `empty` (the value is whole)."""
        return _alt(ex.EMPTY if empty else None, _then(ex.lit("."), digits))

    def _at_least_frac(self, a: str, strict: bool, room: int, min_len: int) -> tuple | None:
        """Fraction digit strings s (min_len..room long) with 0.s >= 0.a (> when strict)."""
        self.budget.spend(DIGIT_WORK)
        if room < min_len:
            return None
        if _is_zero(a):
            return ex.rep(DIGIT, min_len, room) if not strict else self._nonzero_digits(room)
        if room == 0:
            return None
        d = a[0]
        larger = ex.seq(_digit_set(chr(ord(d) + 1), "9"), ex.rep(DIGIT, 0, room - 1)) if d < "9" else None
        return _alt(larger, _then(ex.lit(d), self._at_least_frac(a[1:], strict, room - 1, 0)))

    def _at_most_frac(self, b: str, strict: bool, room: int, min_len: int) -> tuple | None:
        """Fraction digit strings s (min_len..room long) with 0.s <= 0.b (< when strict)."""
        self.budget.spend(DIGIT_WORK)
        if room < min_len:
            return None
        if _is_zero(b):
            return None if strict else ex.rep(ex.lit("0"), min_len, room)
        stop = ex.EMPTY if min_len == 0 else None      # what is written so far is already below b
        if room == 0:
            return stop
        d = b[0]
        smaller = ex.seq(_digit_set("0", chr(ord(d) - 1)), ex.rep(DIGIT, 0, room - 1)) if d > "0" else None
        return _alt(stop, smaller, _then(ex.lit(d), self._at_most_frac(b[1:], strict, room - 1, 0)))

    def _between(self, a: str, a_strict: bool, b: str, b_strict: bool, room: int) -> tuple | None:
        """Fraction texts ("" or "." digits) between 0.a and 0.b, for one integer part."""
        digits = self._between_digits(a, a_strict, b, b_strict, room, 1)
        return self._fraction(digits, empty=_is_zero(a) and not a_strict)

    def _between_digits(self, a: str, a_strict: bool, b: str, b_strict: bool, room: int, min_len: int):
        self.budget.spend(DIGIT_WORK)
        if _is_zero(a) and not a_strict:
            return self._at_most_frac(b, b_strict, room, min_len)
        if _is_zero(b) or room == 0:                    # 0.a < 0.s needs a digit; 0.s <= 0 has none
            return None
        da, db = (a or "0")[0], b[0]
        if da == db:
            return _then(ex.lit(da), self._between_digits(a[1:], a_strict, b[1:], b_strict, room - 1, 0))
        middle = ex.seq(_digit_set(chr(ord(da) + 1), chr(ord(db) - 1)), ex.rep(DIGIT, 0, room - 1)) \
            if ord(db) - ord(da) > 1 else None
        return _alt(_then(ex.lit(da), self._at_least_frac(a[1:], a_strict, room - 1, 0)), middle,
                    _then(ex.lit(db), self._at_most_frac(b[1:], b_strict, room - 1, 0)))

    def _nonzero_digits(self, room: int) -> tuple | None:
        """1..room digits, not all zero."""
        e = None
        for n in range(1, room + 1):
            e = _alt(ex.seq(NONZERO, ex.rep(DIGIT, 0, n - 1)), _then(ex.lit("0"), e))
        return e

    # -- multiples
    def multiples(self, step: int, lo: int | None, hi: int | None) -> tuple | None:
        """Integer multiples of `step` in [lo, hi]: at most MAX_LISTED_MULTIPLES, those nearest zero."""
        k_lo = None if lo is None else -((-lo) // step)             # ceil(lo / step)
        k_hi = None if hi is None else hi // step
        if k_lo is not None and k_hi is not None and k_lo > k_hi:
            return None
        center = 0 if k_lo is None else max(0, k_lo)                # 0, or the end of the range nearest it
        center = center if k_hi is None else min(center, k_hi)
        start = center - MAX_LISTED_MULTIPLES // 2 if k_lo is None else max(k_lo, center - MAX_LISTED_MULTIPLES // 2)
        end = start + MAX_LISTED_MULTIPLES - 1 if k_hi is None else min(k_hi, start + MAX_LISTED_MULTIPLES - 1)
        start = end - MAX_LISTED_MULTIPLES + 1 if k_lo is None else max(k_lo, end - MAX_LISTED_MULTIPLES + 1)
        self.budget.spend(DIGIT_WORK * (end - start + 1))
        return ex.alt(*(ex.lit(str(k * step)) for k in range(start, end + 1)))


def _room(int_part: int) -> int:
    """Fraction digits left after an integer part of this size."""
    return max(0, MAX_SIGNIFICANT_DIGITS - len(str(int_part)))


def _inward(bound: Bound | None, rounding: str) -> Bound | None:
    """The bound at MAX_SIGNIFICANT_DIGITS digits, rounded towards the inside of the interval."""
    if bound is None:
        return None
    with localcontext() as ctx:
        ctx.prec, ctx.rounding = MAX_SIGNIFICANT_DIGITS, rounding
        rounded = +bound.value
    return bound if rounded == bound.value else Bound(rounded, False)


def bound_of(value: int | float, strict: bool) -> Bound:
    """A schema's bound as an exact decimal: an int as it is, a float as its shortest text."""
    return Bound(Decimal(value) if isinstance(value, int) else Decimal(repr(float(value))), strict)


def integer_bounds(lo: Bound | None, hi: Bound | None) -> tuple[int | None, int | None]:
    """The smallest and largest integers inside the bounds."""
    lo_i = None if lo is None else (math.floor(lo.value) + 1 if lo.strict else math.ceil(lo.value))
    hi_i = None if hi is None else (math.ceil(hi.value) - 1 if hi.strict else math.floor(hi.value))
    return lo_i, hi_i
