"""How a model lays out JSON's optional whitespace, learned from the text it has written,
so grammar-forced drafts (forced.py) write the whitespace the model will write.

JSON allows whitespace between any two tokens, so the grammar never forces it; but a model
keeps one layout through a document: compact (`json.dumps`' default, `{"a": 1, "b": 2}`)
or one member per line (`indent=2`: `{\\n  "a": 1,\\n  "b": 2\\n}`). A `TextView` sums up the
text so far in what that takes: the kind of its last non-space byte, the whitespace written
since, whether a newline was ever written (then the layout is one member per line), the
indent step and the current line's indent. `plan` says the whitespace the layout puts
where the grammar leaves it optional; `feed` moves the view over written bytes (the
constraint feeds the model's tokens, the draft walk its own characters).
"""
from __future__ import annotations

from typing import NamedTuple

MAX_RUN_CHARS = 16              # whitespace kept of the current run (the grammar allows 8)
CLOSERS = "}]"
SPACE_BYTES = b" \n\t"

# The kind of the last non-space byte: it decides the whitespace that follows.
START, OPEN, COMMA, COLON, OTHER = range(5)
_KIND = {ord("{"): OPEN, ord("["): OPEN, ord(","): COMMA, ord(":"): COLON}


class TextView(NamedTuple):
    """What the layout needs of the text so far (a tuple: hashable, a cache key, and cheap
    to make on every token)."""
    last_kind: int = START
    run: str = ""               # whitespace written since the last non-space byte
    multiline: bool = False     # a newline was written: one member per line
    unit: int = 0               # the indent step (the first indented line's indent)
    line_indent: int = 0        # spaces before the current line's first non-space byte


def feed(view: TextView, data: bytes) -> TextView:
    """The view after `data` is written."""
    for byte in data:
        if byte in SPACE_BYTES:
            view = view._replace(run=(view.run + chr(byte))[-MAX_RUN_CHARS:],
                                 multiline=view.multiline or byte == 10)
        elif view.run or view.last_kind != _KIND.get(byte, OTHER):
            view = _after_run(view, _KIND.get(byte, OTHER))
    return view


def _after_run(view: TextView, kind: int) -> TextView:
    """A non-space byte of `kind` ends the whitespace run; a newline in it starts a line."""
    if "\n" not in view.run:
        return view._replace(last_kind=kind, run="")
    indent = len(view.run) - view.run.rindex("\n") - 1
    return TextView(kind, "", True, view.unit or indent, indent)


def plan(view: TextView, next_chars: str | None) -> str:
    """The whitespace the layout writes after the view's last non-space byte, where the
    grammar allows any (`next_chars`: the one non-space character that may follow, None
    when several may)."""
    if view.last_kind == COLON:
        return " "
    if not view.multiline:
        return " " if view.last_kind == COMMA else ""
    closes = next_chars is not None and next_chars in CLOSERS
    if view.last_kind == OPEN and not closes:                   # an empty {} or [] stays shut
        return "\n" + " " * (view.line_indent + view.unit)
    if view.last_kind == COMMA:
        return "\n" + " " * view.line_indent
    if view.last_kind == OTHER and closes:
        return "\n" + " " * max(view.line_indent - view.unit, 0)
    return ""
