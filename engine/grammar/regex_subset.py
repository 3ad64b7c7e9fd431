"""A regex subset -> grammar expression (for `guided_regex` and JSON Schema `pattern`).

Supported: literals; `.` (any character but newline); classes `[...]` with ranges and `^`
negation; escapes `\\d \\w \\s \\D \\W \\S`, `\\n \\t \\r \\f \\v`, `\\xHH`, `\\uHHHH` and escaped
punctuation; groups `( )`, `(?: )`, `(?P<name> )`, `(?<name> )`; alternation `|`;
quantifiers `* + ? {n} {n,} {n,m}` (a lazy `?` suffix is accepted: it changes which match
a search finds, not which strings match); `^` at the very start and `$` at the very end.
Not supported (GrammarUnsupported): back-references, look-around, `\\b`, inline flags,
possessive quantifiers, anchors elsewhere.

`parse(pattern, emit)` returns (expr, anchored_start, anchored_end); `emit(ranges)` turns a
character set into an expression, so inside a JSON string each character is written in
its JSON-escaped form (see json_schema.py) while a bare `guided_regex` writes it raw.
"""
from __future__ import annotations

from typing import Callable

from engine.grammar import charset, expr as ex
from engine.grammar.errors import GrammarInvalid, GrammarUnsupported

MAX_REPEAT = 1000               # the largest {n,m} bound compiled
_CLASS_ESCAPES = {"d": charset.DIGITS, "w": charset.WORD, "s": charset.SPACE}
_CHAR_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
_DOT = charset.minus(charset.ANY, charset.chars("\n"))


class _Parser:
    def __init__(self, pattern: str, emit: Callable[[charset.Ranges], tuple], path: str):
        self.p, self.i, self.emit, self.path = pattern, 0, emit, path

    def error(self, cls, message: str):
        return cls(f"pattern {self.p!r} at {self.i}: {message}", path=self.path, keyword="pattern")

    def peek(self) -> str | None:
        return self.p[self.i] if self.i < len(self.p) else None

    def take(self) -> str:
        if self.i >= len(self.p):
            raise self.error(GrammarInvalid, "unexpected end")
        c = self.p[self.i]
        self.i += 1
        return c

    def alternation(self):
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return ex.alt(*branches)

    def sequence(self):
        items = []
        while self.peek() not in (None, "|", ")"):
            if self.peek() in "^$":
                raise self.error(GrammarUnsupported, "anchors are supported only at the ends")
            items.append(self.quantified(self.atom()))
        return ex.seq(*items)

    def quantified(self, atom):
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{" and self._looks_like_count():
                lo, hi = self.counts()
            else:
                return atom
            if self.peek() == "?":
                self.i += 1                               # lazy: same language
            elif self.peek() == "+":
                raise self.error(GrammarUnsupported, "possessive quantifiers are not supported")
            atom = ex.rep(atom, lo, hi)

    def _looks_like_count(self) -> bool:
        end = self.p.find("}", self.i)
        body = self.p[self.i + 1:end] if end > 0 else ""
        return bool(body) and all(ch.isdigit() or ch == "," for ch in body) and body[0] != ","

    def counts(self) -> tuple[int, int | None]:
        end = self.p.index("}", self.i)
        body = self.p[self.i + 1:end]
        self.i = end + 1
        lo_s, _, hi_s = body.partition(",")
        lo = int(lo_s)
        hi = lo if "," not in body else (int(hi_s) if hi_s else None)
        if (hi is not None and hi < lo) or max(lo, hi or 0) > MAX_REPEAT:
            raise self.error(GrammarInvalid if hi is not None and hi < lo else GrammarUnsupported,
                             f"bad or too large repeat count {{{body}}} (at most {MAX_REPEAT})")
        return lo, hi

    def atom(self):
        c = self.take()
        if c == "(":
            return self.group()
        if c == ".":
            return self.emit(_DOT)
        if c == "[":
            return self.emit(self.char_class())
        if c == "\\":
            return self.emit(self.escape(in_class=False))
        if c in "*+?":
            raise self.error(GrammarInvalid, "nothing to repeat")
        if c == ")":
            raise self.error(GrammarInvalid, "unbalanced parenthesis")
        return self.emit(charset.chars(c))

    def group(self):
        if self.p.startswith("?:", self.i):
            self.i += 2
        elif self.p.startswith("?P<", self.i) or (self.p.startswith("?<", self.i)
                                                  and self.p[self.i + 2:self.i + 3] not in ("=", "!")):
            self.i = self.p.index(">", self.i) + 1
        elif self.peek() == "?":
            raise self.error(GrammarUnsupported, "look-around and inline flags are not supported")
        inner = self.alternation()
        if self.peek() != ")":
            raise self.error(GrammarInvalid, "missing )")
        self.i += 1
        return inner

    def escape(self, *, in_class: bool) -> charset.Ranges:
        c = self.take()
        if c.lower() in _CLASS_ESCAPES:
            ranges = _CLASS_ESCAPES[c.lower()]
            return charset.negate(ranges) if c.isupper() else ranges
        if c in _CHAR_ESCAPES:
            return charset.chars(_CHAR_ESCAPES[c])
        if c in "xu":
            width = 2 if c == "x" else 4
            digits = self.p[self.i:self.i + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(GrammarInvalid, f"bad \\{c} escape")
            self.i += width
            return charset.chars(chr(int(digits, 16)))
        if c.isalnum():
            raise self.error(GrammarUnsupported, f"the escape \\{c} is not supported")
        return charset.chars(c)

    def char_class(self) -> charset.Ranges:
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        parts: list[charset.Ranges] = []
        first = True
        while first or self.peek() != "]":
            first = False
            lo = self.class_atom()
            if self.peek() == "-" and self.p[self.i + 1:self.i + 2] not in ("]", ""):
                self.i += 1
                hi = self.class_atom()
                if len(lo) != 1 or len(hi) != 1 or lo[0][0] != lo[0][1] or hi[0][0] != hi[0][1] \
                        or hi[0][0] < lo[0][0]:
                    raise self.error(GrammarInvalid, "bad range in a character class")
                parts.append(charset.normalize([(lo[0][0], hi[0][0])]))
            else:
                parts.append(lo)
        self.i += 1
        ranges = charset.union(*parts)
        return charset.negate(ranges) if negated else ranges

    def class_atom(self) -> charset.Ranges:
        c = self.take()
        if c == "\\":
            return self.escape(in_class=True)
        if c == "[" and self.peek() == ":":
            raise self.error(GrammarUnsupported, "POSIX classes are not supported")
        return charset.chars(c)


def parse(pattern: str, emit: Callable[[charset.Ranges], tuple] = ex.chars,
          path: str = "$") -> tuple[tuple, bool, bool]:
    """pattern -> (expr, anchored at start, anchored at end)."""
    start = pattern.startswith("^")
    end = pattern.endswith("$") and not pattern.endswith("\\$")
    body = pattern[1 if start else 0:len(pattern) - 1 if end else len(pattern)]
    parser = _Parser(body, emit, path)
    e = parser.alternation()
    if parser.i != len(body):
        raise parser.error(GrammarInvalid, "unbalanced parenthesis")
    return e, start, end


def full_match(pattern: str) -> tuple:
    """`guided_regex`: the whole output matches the pattern (anchors are implied)."""
    return parse(pattern)[0]
