"""Sets of Unicode code points as sorted, merged, inclusive ranges: `((lo, hi), ...)`.

The automaton's character edges carry these. A set never contains a surrogate
(U+D800..U+DFFF): they cannot be encoded in UTF-8, so no token can produce one.
`utf8_prefix_range` answers the byte layer's question "which code points start with
these bytes?": for a valid prefix of a UTF-8 sequence it is one contiguous interval.
"""
from __future__ import annotations

from bisect import bisect_right

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
Ranges = tuple[tuple[int, int], ...]


def normalize(ranges) -> Ranges:
    """Sort, merge and drop surrogates."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        for a, b in _minus_surrogates(lo, hi):
            if out and a <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
    return tuple((a, b) for a, b in out)


def _minus_surrogates(lo: int, hi: int):
    s_lo, s_hi = SURROGATES
    if hi < s_lo or lo > s_hi:
        return [(lo, hi)] if lo <= hi else []
    return [r for r in ((lo, s_lo - 1), (s_hi + 1, hi)) if r[0] <= r[1]]


def chars(text: str) -> Ranges:
    return normalize((ord(c), ord(c)) for c in text)


def union(*sets: Ranges) -> Ranges:
    return normalize(r for s in sets for r in s)


def negate(ranges: Ranges) -> Ranges:
    out, start = [], 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return normalize(out)


def minus(a: Ranges, b: Ranges) -> Ranges:
    return intersect(a, negate(b))


def intersect(a: Ranges, b: Ranges) -> Ranges:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def contains(ranges: Ranges, cp: int) -> bool:
    i = bisect_right(ranges, (cp, MAX_CODE_POINT + 1)) - 1
    return i >= 0 and ranges[i][0] <= cp <= ranges[i][1]


def overlaps(ranges: Ranges, lo: int, hi: int) -> bool:
    return bool(intersect(ranges, ((lo, hi),)))


ANY: Ranges = negate(())
DIGITS: Ranges = ((0x30, 0x39),)
WORD: Ranges = normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
SPACE: Ranges = chars(" \t\n\r\f\v")

# UTF-8: sequence length by lead byte, and the code points each length may encode.
_LENGTH_RANGES = {1: (0, 0x7F), 2: (0x80, 0x7FF), 3: (0x800, 0xFFFF), 4: (0x10000, MAX_CODE_POINT)}


def utf8_length(lead: int) -> int:
    """Bytes in the sequence a lead byte starts; 0 for a byte that cannot lead."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def utf8_prefix_range(prefix: bytes) -> tuple[int, int] | None:
    """Code points whose UTF-8 encoding starts with `prefix` (one interval), or None."""
    n = utf8_length(prefix[0])
    if n == 0 or len(prefix) > n or any(b & 0xC0 != 0x80 for b in prefix[1:]):
        return None
    lead_bits = prefix[0] & (0x7F >> n) if n > 1 else prefix[0]
    value = lead_bits
    for b in prefix[1:]:
        value = (value << 6) | (b & 0x3F)
    missing = n - len(prefix)
    lo, hi = value << (6 * missing), ((value + 1) << (6 * missing)) - 1
    n_lo, n_hi = _LENGTH_RANGES[n]
    lo, hi = max(lo, n_lo), min(hi, n_hi)                 # overlong and too-large forms die here
    if lo > hi or (SURROGATES[0] <= lo and hi <= SURROGATES[1]):
        return None
    return lo, hi
