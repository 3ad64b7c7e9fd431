"""How a model lays out JSON's optional whitespace, learned from the text it has written,
so grammar-forced drafts (forced.py) write the whitespace the model will write.

JSON allows whitespace between any two tokens, so the grammar never forces it; but a model
keeps one layout through a document: compact (`json.dumps`' default, `{"a": 1, "b": 2}`,
or without the spaces) or one member per line (`indent=2`: `{\\n  "a": 1,\\n  "b": 2\\n}`).
A `TextView` sums up the text so far in what that takes: the kind of its last non-space
byte, the whitespace written since, the whitespace written after the last `:` and `,`
(json.dumps' " " until the text shows its own) and before the last `,` (none until the text
writes some: a small model may put its commas on lines of their own), whether a newline was ever written (then
the layout is one member per line), the indent step (2 until the first indented line shows
it) and the current line's indent. The
bytes are not parsed: a `:` counts only right after a `"` (a key's end; "10:30" is not one),
a `,` anywhere (text's ", " agrees with the default).

`plan` says the whitespace the layout puts where the grammar leaves it optional; `feed`
moves the view over written bytes (the constraint feeds it the model's tokens, the draft
walk its own characters).
"""
from __future__ import annotations

from typing import NamedTuple

from engine.grammar.jsontext import MAX_INDENT_CHARS

# Whitespace kept of the current run: the grammar's longest (a newline and its indent).
MAX_RUN_CHARS = 1 + MAX_INDENT_CHARS
CLOSERS = "}]"
GUESSED_INDENT_STEP = 2         # the indent step before the text shows its own (json.dumps(indent=2))
SPACE_BYTES = b" \n\t"

# The kind of the last non-space byte: it decides the whitespace that follows.
START, OPEN, COMMA, COLON, QUOTE, OTHER = range(6)
_KIND = {ord("{"): OPEN, ord("["): OPEN, ord(","): COMMA, ord('"'): QUOTE}
COLON_BYTE = ord(":")


class TextView(NamedTuple):
    """What the layout needs of the text so far (a tuple: hashable, a cache key, and cheap
    to make on every token)."""
    last_kind: int = START
    run: str = ""               # whitespace written since the last non-space byte
    multiline: bool = False     # a newline was written: one member per line
    unit: int = 0               # the indent step (the first indented line's indent)
    line_indent: int = 0        # spaces before the current line's first non-space byte
    after_colon: str = " "      # the whitespace the text wrote after its last key's `:`
    after_comma: str = " "      # ... and after its last `,` on the same line
    before_comma: str = ""      # ... and between its last value and the `,` after it


def feed(view: TextView, data: bytes) -> TextView:
    """The view after `data` is written."""
    for byte in data:
        if byte in SPACE_BYTES:
            view = view._replace(run=(view.run + chr(byte))[-MAX_RUN_CHARS:],
                                 multiline=view.multiline or byte == 10)
            continue
        kind = COLON if byte == COLON_BYTE and view.last_kind == QUOTE else _KIND.get(byte, OTHER)
        if view.run or view.last_kind != kind or kind == COMMA:
            view = _after_run(view, kind)
    return view


def _after_run(view: TextView, kind: int) -> TextView:
    """A non-space byte of `kind` ends the whitespace run: what followed a `:` or a `,` is
    learned, a newline in it starts a line."""
    run = view.run
    if kind == COMMA and view.last_kind in (QUOTE, OTHER):
        view = view._replace(before_comma=run)
    if view.last_kind == COLON:
        view = view._replace(after_colon=run)
    elif view.last_kind == COMMA and "\n" not in run:
        view = view._replace(after_comma=run)
    if "\n" not in run:
        return view._replace(last_kind=kind, run="")
    indent = len(run) - run.rindex("\n") - 1
    return view._replace(last_kind=kind, run="", multiline=True, unit=view.unit or indent, line_indent=indent)


def plan(view: TextView, next_chars: str | None) -> str:
    """The whitespace the layout writes after the view's last non-space byte, where the
    grammar allows any (`next_chars`: the one non-space character that may follow, None
    when several may)."""
    if view.last_kind == COLON:
        return view.after_colon
    if view.last_kind in (QUOTE, OTHER) and next_chars == ",":
        return view.before_comma
    if not view.multiline:
        return view.after_comma if view.last_kind == COMMA else ""
    closes = next_chars is not None and next_chars in CLOSERS
    if view.last_kind == OPEN and not closes:                   # an empty {} or [] stays shut
        return "\n" + " " * (view.line_indent + (view.unit or GUESSED_INDENT_STEP))
    if view.last_kind == COMMA:
        return "\n" + " " * view.line_indent
    if view.last_kind in (QUOTE, OTHER) and closes:
        return "\n" + " " * max(view.line_indent - view.unit, 0)
    return ""
