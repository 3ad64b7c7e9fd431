"""JSON Schema strings: formats, patterns and lengths, alone or combined.

A `format` is written by a fixed regex (`FORMATS`) chosen to be a strict subset of what
validators accept: jsonschema's format checker and the patterns Zod 4 emits next to it
(uuid versions 1-8, a lower-case `Z` date-time, an email of plain labels, an IPv6 address in
its full eight-group form, an http(s) URI with a host, path and query of unreserved
characters). Each is bounded in length.

`format` and `pattern` together: the output must match both, so the string is the
intersection of the format's language and the pattern's (a search, as JSON Schema reads a
pattern), built exactly as one small automaton (expr.py "i", regular.py): any pattern the
regex subset reads is served with any format, look-aheads included (Zod 3's email,
`^(?!\\.)(?!.*\\.\\.)...`). A pattern that leaves no string of the format is a 422.

Lengths with a format or an anchored pattern: the expression's own length bounds (in
characters, the pattern read raw; a format with a pattern: the format's) must lie within
minLength..maxLength; then the lengths hold by construction (pydantic's HttpUrl: format
uri, maxLength 2083). Otherwise a 422.
A plain string's maxLength above `MAX_STRING_CHARS` is served up to that many characters
(a subset); a minLength above it is a 422.
"""
from __future__ import annotations

import math

from engine.grammar import expr as ex, jsontext as jt, regex_subset
from engine.grammar.budget import WorkBudget
from engine.grammar.errors import GrammarInvalid, GrammarUnsupported

MAX_STRING_CHARS = regex_subset.MAX_REPEAT      # the longest plain string written (maxLength above: a subset)
SHARED_CHAR_ABOVE = 4           # a maxLength above this repeats a call, not the expression
PATTERN_WORK = 4                # budget units per character of a pattern parsed

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_LABEL = r"[a-z][a-z0-9]{0,20}(?:-[a-z0-9]{1,20}){0,2}"     # a host name label: a letter first, no "--"
_DATE = (r"[12]\d{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
         r"|02-(?:0[1-9]|1\d|2[0-8]))")
_TIME = r"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?"
_UNRESERVED = r"[A-Za-z0-9._~-]"
FORMATS = {
    "date": _DATE,
    "time": _TIME + r"(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)",
    "date-time": _DATE + "T" + _TIME + "Z",
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
    "email": r"[a-z0-9]{1,20}(?:[._+-][a-z0-9]{1,20}){0,2}@[a-z0-9]{1,20}(?:-[a-z0-9]{1,20})?"
             r"(?:\.[a-z0-9]{1,20}){0,2}\.[a-z]{2,8}",
    "hostname": _LABEL + r"(?:\." + _LABEL + r"){0,3}",
    "ipv4": _OCTET + r"(?:\." + _OCTET + r"){3}",
    "ipv6": r"[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){7}",
    "uri": r"https?://" + _LABEL + r"(?:\." + _LABEL + r"){0,3}\.[a-z]{2,8}(?::[1-9]\d{1,3})?"
           r"(?:/" + _UNRESERVED + r"{1,24}){0,6}/?(?:\?" + _UNRESERVED + r"{1,16}=" + _UNRESERVED + r"{0,16}"
           r"(?:&" + _UNRESERVED + r"{1,16}=" + _UNRESERVED + r"{0,16}){0,3})?",
}
FORMATS["url"] = FORMATS["uri"]
FORMATS["ipvanyaddress"] = FORMATS["ipv4"]                 # pydantic's IPvAnyAddress: an IPv4 one is one
STRING_TEXT = ex.star(jt.STRING_CHAR)          # any JSON string body: where a pattern is not anchored


def length_bounds(e: tuple) -> tuple[int, float]:
    """(fewest, most) characters of the texts of a call-free expression (most: inf if unbounded)."""
    kind = e[0]
    if kind == "c":
        return 1, 1
    if kind == "s":
        parts = [length_bounds(item) for item in e[1]]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    if kind == "a":
        parts = [length_bounds(item) for item in e[1]]
        return min(p[0] for p in parts), max(p[1] for p in parts)
    if kind == "r":
        lo, hi = length_bounds(e[1])
        return lo * e[2], math.inf if e[3] is None and hi > 0 else hi * (e[3] or 0)
    if kind == "i":                                     # within both sides' bounds (maybe tighter)
        (lo_a, hi_a), (lo_b, hi_b) = length_bounds(e[1]), length_bounds(e[2])
        return max(lo_a, lo_b), min(hi_a, hi_b)
    if kind == "d":
        return length_bounds(e[1])
    raise ValueError(f"no length bounds for an expression of kind {kind!r}")


class StringCompiler:
    """`string(s, path)`: the expression of a string schema (format, pattern, lengths)."""

    def __init__(self, rules: dict[str, tuple], budget: WorkBudget):
        self.rules = rules
        self.budget = budget

    def string(self, s: dict, path: str, lengths: tuple[int, int | None]) -> tuple:
        lo, hi = lengths
        fmt, pattern = s.get("format"), s.get("pattern")
        if pattern is not None and not isinstance(pattern, str):
            raise GrammarInvalid(f"'pattern' at {path} must be a string", path=f"{path}.pattern")
        if fmt is not None and fmt not in FORMATS:
            raise GrammarUnsupported(f"the string format {fmt!r} at {path} is not supported "
                                     f"(served: {', '.join(sorted(FORMATS))})", path=f"{path}.format", keyword="format")
        if fmt is not None:
            return self._bounded(FORMATS[fmt], (lo, hi), path, "format", pattern)
        if pattern is not None:
            return self._pattern(pattern, (lo, hi), path)
        if lo > MAX_STRING_CHARS:
            raise GrammarUnsupported(f"'minLength' at {path} above {MAX_STRING_CHARS}", path=f"{path}.minLength",
                                     keyword="minLength")
        hi = None if hi is None else min(hi, MAX_STRING_CHARS)
        if hi is not None and hi > SHARED_CHAR_ABOVE:          # one call per character, not a copy
            self.rules.setdefault("string.char", jt.STRING_CHAR)
            return ex.seq(ex.lit('"'), ex.rep(ex.ref("string.char"), lo, hi), ex.lit('"'))
        return jt.string(lo, hi)

    def _pattern(self, pattern: str, lengths: tuple[int, int | None], path: str) -> tuple:
        if lengths == (0, None):
            return ex.seq(ex.lit('"'), self._search(pattern, path), ex.lit('"'))
        return self._bounded(pattern, lengths, path, "pattern")   # a full match is also a search

    def _search(self, pattern: str, path: str) -> tuple:
        """The JSON string bodies that contain a match of `pattern` (JSON Schema's reading)."""
        self.budget.spend(PATTERN_WORK * len(pattern))
        return regex_subset.parse(pattern, jt.json_chars, f"{path}.pattern", free=STRING_TEXT, search=True)

    def _bounded(self, regex: str, lengths: tuple[int, int | None], path: str, keyword: str,
                 pattern: str | None = None) -> tuple:
        """A full match of `regex` (and a search of `pattern`, if any) as a JSON string, refused
        unless the lengths of `regex` lie within `lengths`."""
        self.budget.spend(2 * PATTERN_WORK * len(regex))
        where = f"{path}.{keyword}"
        raw = regex_subset.parse(regex, ex.chars, where)            # one character per character: lengths
        fewest, most = length_bounds(raw)
        lo, hi = lengths
        if fewest < lo or (hi is not None and most > hi):
            raise GrammarUnsupported(f"'{keyword}' at {path} writes strings of {fewest}..{most} characters, "
                                     f"which minLength/maxLength ({lo}..{hi}) do not all allow", path=where,
                                     keyword=keyword)
        e = regex_subset.parse(regex, jt.json_chars, where, free=STRING_TEXT)
        if pattern is not None:
            e = ex.both(e, self._search(pattern, path), where=f"{path}.pattern")
        return ex.seq(ex.lit('"'), e, ex.lit('"'))
