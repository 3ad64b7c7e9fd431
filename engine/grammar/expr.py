"""Grammar expressions: the small language both compilers (JSON Schema, regex) emit.

An expression is a frozen tuple, so equal grammars are equal values:

    ("c", ranges)          one character from a code-point set (engine/grammar/charset.py)
    ("s", (e1, e2, ...))   a sequence; ("s", ()) matches the empty string
    ("a", (e1, e2, ...))   an alternation
    ("r", e, lo, hi)       e repeated lo..hi times (hi None: unbounded)
    ("n", name)            a call of a named rule (how recursion and sharing are written)
    ("i", e1, e2, where)   the strings of both e1 and e2 (a format with a pattern; a look-ahead)
    ("d", e1, e2, where)   the strings of e1 that are not strings of e2 (a negative look-ahead)

"i" and "d" take call-free operands and are built as one small DFA (regular.py). `where` is
None, or the path at which an empty result is refused (a pattern, or a format with a
pattern, that leaves nothing to write); elsewhere an empty result is a branch no text takes.

A grammar is `rules: {name: expr}` plus a root name; `automaton.compile_grammar` turns it
into the character automaton.
"""
from __future__ import annotations

from engine.grammar import charset

Expr = tuple
EMPTY: Expr = ("s", ())


def chars(ranges: charset.Ranges) -> Expr:
    return ("c", ranges)


def lit(text: str) -> Expr:
    return seq(*(("c", ((ord(c), ord(c)),)) for c in text))


def seq(*items: Expr) -> Expr:
    flat: list[Expr] = []
    for item in items:
        flat.extend(item[1] if item[0] == "s" else (item,))
    return flat[0] if len(flat) == 1 else ("s", tuple(flat))


def alt(*items: Expr) -> Expr:
    unique = tuple(dict.fromkeys(items))
    return unique[0] if len(unique) == 1 else ("a", unique)


def rep(item: Expr, lo: int, hi: int | None = None) -> Expr:
    return ("r", item, lo, hi)


def opt(item: Expr) -> Expr:
    return rep(item, 0, 1)


def star(item: Expr) -> Expr:
    return rep(item, 0, None)


def ref(name: str) -> Expr:
    return ("n", name)


def both(left: Expr, right: Expr, where: str | None = None) -> Expr:
    return ("i", left, right, where)


def but_not(left: Expr, right: Expr, where: str | None = None) -> Expr:
    return ("d", left, right, where)


def not_starting_with(trigger: str, rest: Expr) -> Expr:
    """Any text (each character from `rest`'s loop) that does not begin with `trigger`:
    empty, or it leaves the trigger at some character, or it ends inside the trigger."""
    anything = star(chars(charset.ANY))
    branches: list[Expr] = []
    for i in range(len(trigger)):
        other = charset.minus(charset.ANY, charset.chars(trigger[i]))
        branches.append(seq(lit(trigger[:i]), chars(other), anything))
        branches.append(lit(trigger[:i]))                  # ends before the trigger is complete
    return alt(*branches)
