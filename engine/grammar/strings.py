"""JSON Schema strings: formats, patterns and lengths, alone or combined.

A `format` is written by a fixed regex (`FORMATS`) chosen to be a strict subset of what
validators accept: jsonschema's format checker and the patterns Zod 4 emits next to it
(uuid versions 1-8, a lower-case `Z` date-time, an email of plain labels, an IPv6 address in
its full eight-group form, an http(s) URI with a host, path and query of unreserved
characters). Each is bounded in length.

`format` and `pattern` together: the output must match both, and this compiler has no
intersection of two expressions. So the format's grammar is written, and the pattern is
accepted only when it is one of `LIBRARY_PATTERNS[format]` (the exact pattern text the
library emits, checked by tests/engine/grammar/test_grammar_formats.py to match every string of the
format's grammar); any other pattern with a format is a 422.

Lengths with a format or an anchored pattern: the expression's own length bounds (in
characters, the pattern read raw) must lie within minLength..maxLength; then the lengths
hold by construction (pydantic's HttpUrl: format uri, maxLength 2083). Otherwise a 422.
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
# The patterns Zod 4 writes next to a format (z.uuid(), z.email(), z.iso.date(), z.iso.datetime(), z.ipv4(), z.ipv6()).
LIBRARY_PATTERNS = {
    "uuid": {r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"
             r"|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"},
    "email": {r"^(?:[A-Za-z0-9_'+\-]+\.)*[A-Za-z0-9_'+\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\-]*\.)+"
              r"[A-Za-z]{2,}$"},
    "date": {r"^(?:(?:\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29|\d{4}-"
             r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|(?:02)-"
             r"(?:0[1-9]|1\d|2[0-8])))$"},
    "date-time": {r"^(?:(?:\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29|"
                  r"\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|"
                  r"(?:02)-(?:0[1-9]|1\d|2[0-8])))T(?:(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?(?:Z))$"},
    "ipv4": {r"^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\.){3}"
             r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])$"},
    "ipv6": {r"^(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:"
             r"[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}"
             r"(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}"
             r"(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:((:[0-9a-fA-F]{1,4}){1,6})|:((:[0-9a-fA-F]{1,4}){1,7}|:))$"},
}


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
            if pattern is not None and pattern not in LIBRARY_PATTERNS.get(fmt, ()):
                raise GrammarUnsupported(f"'pattern' together with format {fmt!r} at {path} is served only for the "
                                         "pattern a library emits for that format", path=f"{path}.pattern",
                                         keyword="pattern")
            return self._bounded(FORMATS[fmt], (lo, hi), path, "format")
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
            self.budget.spend(PATTERN_WORK * len(pattern))
            e, anchored_start, anchored_end = regex_subset.parse(pattern, jt.json_chars, f"{path}.pattern")
            free = ex.star(jt.STRING_CHAR)
            return ex.seq(ex.lit('"'), ex.EMPTY if anchored_start else free, e,
                          ex.EMPTY if anchored_end else free, ex.lit('"'))
        return self._bounded(pattern, lengths, path, "pattern")   # a full match is also a search

    def _bounded(self, regex: str, lengths: tuple[int, int | None], path: str, keyword: str) -> tuple:
        """A full match of `regex` as a JSON string, refused unless its lengths lie within `lengths`."""
        self.budget.spend(2 * PATTERN_WORK * len(regex))
        where = f"{path}.{keyword}"
        raw = regex_subset.parse(regex, ex.chars, where)[0]           # one character per character: lengths
        fewest, most = length_bounds(raw)
        lo, hi = lengths
        if fewest < lo or (hi is not None and most > hi):
            raise GrammarUnsupported(f"'{keyword}' at {path} writes strings of {fewest}..{most} characters, "
                                     f"which minLength/maxLength ({lo}..{hi}) do not all allow", path=where,
                                     keyword=keyword)
        e = regex_subset.parse(regex, jt.json_chars, where)[0]
        return ex.seq(ex.lit('"'), e, ex.lit('"'))
