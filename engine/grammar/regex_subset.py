"""A regex subset -> grammar expression (for `guided_regex` and JSON Schema `pattern`).

Supported: literals; `.` (any character but newline); classes `[...]` with ranges and `^`
negation; escapes `\\d \\w \\s \\D \\W \\S`, `\\n \\t \\r \\f \\v`, `\\xHH`, `\\uHHHH` and escaped
punctuation; groups `( )`, `(?: )`, `(?P<name> )`, `(?<name> )`; alternation `|`;
quantifiers `* + ? {n} {n,} {n,m}` (a lazy `?` suffix is accepted: it changes which match
a search finds, not which strings match); `^` at the very start and `$` at the very end.
In the pattern's top level (not inside a group) also look-aheads `(?=X)` / `(?!X)` (a
branch of X may end with `$`: X reaches the end) and word boundaries `\\b` / `\\B`: a
condition on the text on either side of a point, written as an intersection or difference
(expr.py "i"/"d"): after `P`, `(?=X)R` is P (R and X.*), `(?!X)R` is P (R but not X.*),
and `P\\bR` splits into (P ending in a word character, R not starting with one) or the
other way round. Not supported (GrammarUnsupported, naming the construct):
back-references, look-behind, look-around inside a group, inline flags, possessive
quantifiers, anchors elsewhere.

`parse(pattern, emit, path, free=..., search=...)` returns the expression of the texts
that match: a full match, or with `search` a text that contains a match (`free`, the
expression of any text, is written where the pattern is not anchored). `emit(ranges)`
turns a character set into an expression, so inside a JSON string each character is
written in its JSON-escaped form (see json_schema.py) while a bare `guided_regex` writes it
raw; `free` must be written the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.grammar import charset, expr as ex
from engine.grammar.errors import GrammarInvalid, GrammarUnsupported

MAX_REPEAT = 1000               # the largest {n,m} bound compiled
_CLASS_ESCAPES = {"d": charset.DIGITS, "w": charset.WORD, "s": charset.SPACE}
_CHAR_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
_DOT = charset.minus(charset.ANY, charset.chars("\n"))
ANY_TEXT = ex.star(ex.chars(charset.ANY))       # `free` for a raw pattern


@dataclass(frozen=True)
class _Condition:
    """A zero-width item: a look-ahead (kind "=" or "!"), a word boundary (kind "b" or "B"),
    or the `$` that closes a look-ahead's branch (kind "$", `_END`)."""
    kind: str
    body: tuple | None = None                   # a look-ahead's texts from its point on (X.*, or X$)


_END = _Condition("$")


class _Parser:
    def __init__(self, pattern: str, emit: Callable[[charset.Ranges], tuple], path: str, free: tuple):
        self.p, self.i, self.emit, self.path, self.free = pattern, 0, emit, path, free
        self.depth = 0                                  # groups open around the current position

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
        return ex.seq(*self.items())

    def items(self, *, may_end: bool = False) -> list:
        """The items of one branch; at the top level they may include `_Condition`s. With
        `may_end` (a look-ahead's branch) a `$` may close it: then the last item is `_END`."""
        items = []
        while self.peek() not in (None, "|", ")"):
            if may_end and self.peek() == "$" and self.p[self.i + 1:self.i + 2] in ("|", ")"):
                self.i += 1
                items.append(_END)
                break
            if self.peek() in "^$":
                raise self.error(GrammarUnsupported, "anchors are supported only at the ends")
            at = self.i
            item = self.quantified(self.atom())
            if isinstance(item, _Condition) and self.depth > 0:
                self.i = at
                raise self.error(GrammarUnsupported, f"{self.p[at:at + 3]!r}: look-ahead and \\b are supported "
                                 "only at the top level of a pattern, not inside a group")
            items.append(item)
        return items

    def top(self, prefix: tuple, tail: tuple):
        """The whole pattern between `prefix` and `tail` (free text where it is not anchored)."""
        branches = [self.items()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.items())
        if not any(isinstance(item, _Condition) for branch in branches for item in branch):
            return ex.seq(prefix, ex.alt(*(ex.seq(*branch) for branch in branches)), tail)
        out = [self.resolve(branch, 0, prefix, tail, False, {}) for branch in branches]
        if len(out) == 1 and out[0][0] in ("i", "d"):   # a condition no text satisfies: refused here
            out[0] = out[0][:3] + (self.path,)
        return ex.alt(*out)

    def resolve(self, items: list, start: int, prefix: tuple, tail: tuple, last_word: bool,
                memo: dict) -> tuple:
        """prefix, items[start:], tail in sequence, the first condition applied and the rest
        recursively (`memo`: each (start, last_word) once). `last_word`: the character just
        before `prefix` is a word character (False: it is not, or this is the text's start),
        which a `\\b` right here must know."""
        if (start, last_word) in memo:
            return memo[start, last_word]
        k = next((j for j in range(start, len(items)) if isinstance(items[j], _Condition)), None)
        if k is None:
            return ex.seq(prefix, *items[start:], tail)
        cond = items[k]
        before = ex.seq(prefix, *items[start:k])
        # The rest's own `\b`s may look back past its start: resolve it for either last
        # character, and split `before` by its last character when the two differ.
        rest_after = {w: self.resolve(items, k + 1, ex.EMPTY, tail, w, memo) for w in (True, False)}
        word = self.emit(charset.WORD)
        starts_word = ex.seq(word, self.free)
        if cond.kind in "=!":
            apply = ex.both if cond.kind == "=" else ex.but_not
            if rest_after[True] == rest_after[False]:
                out = ex.seq(before, apply(rest_after[True], cond.body))
            else:
                out = ex.alt(*(ex.seq(self.ending(before, w, last_word), apply(rest_after[w], cond.body))
                               for w in (True, False)))
        else:   # \b: a word character on exactly one side (the text's ends are not); \B: both or neither
            word_next = {True: ex.both, False: ex.but_not}
            out = ex.alt(*(ex.seq(self.ending(before, w, last_word),
                                  word_next[w != (cond.kind == "b")](rest_after[w], starts_word))
                           for w in (True, False)))
        memo[start, last_word] = out
        return out

    def ending(self, before: tuple, word: bool, last_word: bool) -> tuple:
        """The texts of `before` after which the last character is (word) or is not a word
        character; an empty text keeps the character before it (`last_word`)."""
        ends_word = ex.seq(self.free, self.emit(charset.WORD))
        if not _nullable(before):
            return (ex.both if word else ex.but_not)(before, ends_word)
        if word:
            return ex.alt(ex.both(before, ends_word), ex.EMPTY) if last_word else ex.both(before, ends_word)
        return ex.but_not(before, ends_word) if not last_word else ex.but_not(before, ex.alt(ends_word, ex.EMPTY))

    def quantified(self, atom):
        while True:
            c = self.peek()
            if isinstance(atom, _Condition):
                if c is not None and (c in "*+?" or (c == "{" and self._looks_like_count())):
                    raise self.error(GrammarUnsupported, "a quantifier on a look-ahead or \\b is not supported")
                return atom
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
            if self.peek() in ("b", "B"):
                return _Condition(self.take())
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
        elif self.p.startswith("?=", self.i) or self.p.startswith("?!", self.i):
            kind = self.p[self.i + 1]
            self.i += 2
            return _Condition(kind, self.look_ahead_body())
        elif self.p.startswith("?<=", self.i) or self.p.startswith("?<!", self.i):
            raise self.error(GrammarUnsupported, f"look-behind ({self.p[self.i:self.i + 3]}...) is not supported")
        elif self.p.startswith("?P=", self.i):
            raise self.error(GrammarUnsupported, "back-references ((?P=name)) are not supported")
        elif self.peek() == "?":
            raise self.error(GrammarUnsupported, f"inline flags and other ({self.p[self.i:self.i + 2]}...) groups "
                             "are not supported")
        return self.closed_group()

    def look_ahead_body(self):
        """X of `(?=X)` as the texts it allows from its point on: X and then any text, or X
        up to the end where a branch of X closes with `$`."""
        self.depth += 1
        branches = []
        while True:
            items = self.items(may_end=True)
            ends = bool(items) and items[-1] is _END
            branches.append(ex.seq(*items[:-1]) if ends else ex.seq(*items, self.free))
            if self.peek() != "|":
                break
            self.i += 1
        self.depth -= 1
        if self.peek() != ")":
            raise self.error(GrammarInvalid, "missing )")
        self.i += 1
        return ex.alt(*branches)

    def closed_group(self):
        self.depth += 1
        inner = self.alternation()
        self.depth -= 1
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
        if c in "123456789" or (c == "k" and self.peek() == "<"):
            raise self.error(GrammarUnsupported, f"back-references (\\{c}) are not supported")
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


def _nullable(e: tuple) -> bool:
    """The call-free expression matches the empty text."""
    kind = e[0]
    if kind == "c":
        return False
    if kind == "s":
        return all(_nullable(item) for item in e[1])
    if kind == "a":
        return any(_nullable(item) for item in e[1])
    if kind == "r":
        return e[2] == 0 or _nullable(e[1])
    if kind == "i":
        return _nullable(e[1]) and _nullable(e[2])
    return _nullable(e[1]) and not _nullable(e[2])     # "d"


def parse(pattern: str, emit: Callable[[charset.Ranges], tuple] = ex.chars, path: str = "$", *,
          free: tuple = ANY_TEXT, search: bool = False) -> tuple:
    """pattern -> the expression of the texts it matches in full, or (search) that contain a
    match: `free` is written before an unanchored start and after an unanchored end."""
    start = pattern.startswith("^")
    end = pattern.endswith("$") and not pattern.endswith("\\$")
    body = pattern[1 if start else 0:len(pattern) - 1 if end else len(pattern)]
    parser = _Parser(body, emit, path, free)
    e = parser.top(ex.EMPTY if start or not search else free, ex.EMPTY if end or not search else free)
    if parser.i != len(body):
        raise parser.error(GrammarInvalid, "unbalanced parenthesis")
    return e


def full_match(pattern: str) -> tuple:
    """`guided_regex`: the whole output matches the pattern (anchors are implied)."""
    return parse(pattern)
