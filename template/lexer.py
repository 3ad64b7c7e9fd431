"""Lexer: template source -> a flat list of tokens.

The source is a mix of plain text and three kinds of tags:

    {{ expression }}    print the value          -> VAR_BEGIN ... VAR_END
    {% statement %}     control flow, assignment -> BLOCK_BEGIN ... BLOCK_END
    {# comment #}       dropped entirely
    {% raw %}...{% endraw %}  text kept verbatim (tags inside are not parsed)

Inside a tag the text is cut into NAME, STRING, INT, FLOAT and OP tokens; outside it is
DATA. Whitespace is controlled exactly as Jinja does with the options Hugging Face renders
chat templates with (`trim_blocks=True`, `lstrip_blocks=True`):

- `{%-`, `{{-`, `{#-` strip all whitespace (newlines included) before the tag;
  `-%}`, `-}}`, `-#}` strip all whitespace after it.
- trim_blocks: the first newline right after a `%}` or `#}` is removed (`+%}` keeps it).
- lstrip_blocks: spaces and tabs between the start of a line and a `{%` or `{#` are
  removed (`{%+` keeps them). `{{` tags are never lstripped.

Before lexing, line endings are normalised to "\\n" and one trailing newline is dropped
(Jinja's `keep_trailing_newline=False`). This module knows nothing about the grammar:
the parser decides what the tokens mean.
"""

from __future__ import annotations

import bisect
import codecs
import re
from dataclasses import dataclass

from .errors import TemplateSyntaxError

DATA, VAR_BEGIN, VAR_END, BLOCK_BEGIN, BLOCK_END = "data", "var_begin", "var_end", "block_begin", "block_end"
NAME, STRING, INT, FLOAT, OP, EOF = "name", "string", "int", "float", "op", "eof"

# Largest template source accepted: real chat templates are under 20 KB.
MAX_TEMPLATE_CHARS = 1_000_000

_NEWLINE_RE = re.compile(r"\r\n|\r|\n")
_TAG_START_RE = re.compile(r"\{([{%#])([-+]?)")
_RAW_BEGIN_RE = re.compile(r"\{%([-+]?)\s*raw\s*(?:-%\}\s*|%\})")
_RAW_END_RE = re.compile(r"(.*?)\{%([-+]?)\s*endraw\s*(?:\+%\}|-%\}\s*|%\}\n?)", re.S)
_COMMENT_END_RE = re.compile(r"(.*?)(?:\+#\}|-#\}\s*|#\}\n?)", re.S)
_BLOCK_END_RE = re.compile(r"\+%\}|-%\}\s*|%\}\n?")
_VAR_END_RE = re.compile(r"-\}\}\s*|\}\}")
_WHITESPACE_RE = re.compile(r"\s+")
_FLOAT_RE = re.compile(r"(?<!\.)\d+(?:_\d+)*(?:\.\d+(?:_\d+)*(?:[eE][+-]?\d+(?:_\d+)*)?|[eE][+-]?\d+(?:_\d+)*)")
_INT_RE = re.compile(r"\d+(?:_\d+)*")
_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_STRING_RE = re.compile(r"'([^'\\]*(?:\\.[^'\\]*)*)'|\"([^\"\\]*(?:\\.[^\"\\]*)*)\"", re.S)
_OPERATOR_RE = re.compile(r"//|\*\*|==|!=|>=|<=|[+\-/*%~\[\](){}<>=.:|,;]")
_OPENERS = {"(": ")", "[": "]", "{": "}"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    value: object
    lineno: int
    col: int


class _Positions:
    """Maps a character offset to a 1-based (line, column)."""

    def __init__(self, source: str) -> None:
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def at(self, pos: int) -> tuple[int, int]:
        line_index = bisect.bisect_right(self._line_starts, pos) - 1
        return line_index + 1, pos - self._line_starts[line_index] + 1


def normalize_source(source: str) -> str:
    """Normalise line endings and drop one trailing newline, as Jinja does."""
    lines = _NEWLINE_RE.split(source)
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines)


def _strip_before_tag(text: str, sign: str, can_lstrip: bool, line_starting: bool) -> str:
    """Apply `-` (strip all whitespace) or lstrip_blocks to the text before a tag."""
    if sign == "-":
        return text.rstrip()
    if sign == "+" or not can_lstrip:
        return text
    line_start = text.rfind("\n") + 1
    if (line_start > 0 or line_starting) and _WHITESPACE_RE.fullmatch(text, line_start):
        return text[:line_start]
    return text


def decode_string_literal(body: str) -> str:
    """Decode Python-style escapes (\\n, \\t, \\', \\xNN, \\uNNNN); unknown ones stay."""
    if "\\" not in body:
        return body
    return codecs.decode(body.encode("ascii", "backslashreplace"), "unicode-escape")


class Lexer:
    """One pass over one source string; `tokenize()` returns the token list."""

    def __init__(self, source: str) -> None:
        if len(source) > MAX_TEMPLATE_CHARS:
            raise TemplateSyntaxError(f"template longer than {MAX_TEMPLATE_CHARS} characters", 1, 1)
        self.source = normalize_source(source)
        self.positions = _Positions(self.source)
        self.tokens: list[Token] = []

    def fail(self, message: str, pos: int) -> TemplateSyntaxError:
        lineno, col = self.positions.at(pos)
        return TemplateSyntaxError(message, lineno, col)

    def emit(self, kind: str, value: object, pos: int) -> None:
        lineno, col = self.positions.at(pos)
        self.tokens.append(Token(kind, value, lineno, col))

    def tokenize(self) -> list[Token]:
        source, pos, line_starting = self.source, 0, True
        while pos < len(source):
            start = _TAG_START_RE.search(source, pos)
            if start is None:
                self.emit(DATA, source[pos:], pos)
                break
            kind, sign = start.group(1), start.group(2)
            raw = _RAW_BEGIN_RE.match(source, start.start()) if kind == "%" else None
            text = _strip_before_tag(source[pos:start.start()], sign, kind != "{", line_starting)
            if text:
                self.emit(DATA, text, pos)
            if raw is not None:
                pos = self._lex_raw(raw)
            elif kind == "#":
                end = _COMMENT_END_RE.match(source, start.end())
                if end is None:
                    raise self.fail("Missing end of comment tag", start.start())
                pos = end.end()
            else:
                pos = self._lex_tag(start.start(), start.end(), kind)
            line_starting = source[pos - 1:pos] == "\n"
        self.emit(EOF, None, len(source))
        return self.tokens

    def _lex_raw(self, raw: re.Match) -> int:
        end = _RAW_END_RE.match(self.source, raw.end())
        if end is None:
            raise self.fail("Missing end of raw directive", raw.start())
        line_starting = self.source[raw.end() - 1:raw.end()] == "\n"
        text = _strip_before_tag(end.group(1), end.group(2), True, line_starting)
        if text:
            self.emit(DATA, text, raw.end())
        return end.end()

    def _lex_tag(self, tag_start: int, pos: int, kind: str) -> int:
        source = self.source
        is_block = kind == "%"
        self.emit(BLOCK_BEGIN if is_block else VAR_BEGIN, None, tag_start)
        end_re = _BLOCK_END_RE if is_block else _VAR_END_RE
        closers: list[str] = []
        while True:
            if not closers:
                end = end_re.match(source, pos)
                if end is not None:
                    self.emit(BLOCK_END if is_block else VAR_END, None, pos)
                    return end.end()
            space = _WHITESPACE_RE.match(source, pos)
            if space is not None:
                pos = space.end()
                continue
            if pos >= len(source):
                what = "statement block" if is_block else "print statement"
                raise self.fail(f"unexpected end of template, expected end of {what}", tag_start)
            pos = self._lex_one(pos, closers)

    def _lex_one(self, pos: int, closers: list[str]) -> int:
        source = self.source
        m = _FLOAT_RE.match(source, pos)
        if m is not None:
            self.emit(FLOAT, float(m.group().replace("_", "")), pos)
            return m.end()
        m = _INT_RE.match(source, pos)
        if m is not None:
            self.emit(INT, int(m.group().replace("_", "")), pos)
            return m.end()
        m = _NAME_RE.match(source, pos)
        if m is not None:
            self.emit(NAME, m.group(), pos)
            return m.end()
        m = _STRING_RE.match(source, pos)
        if m is not None:
            body = m.group()[1:-1]
            try:
                self.emit(STRING, decode_string_literal(body), pos)
            except UnicodeDecodeError as exc:
                raise self.fail(f"invalid escape in string literal: {exc.reason}", pos) from None
            return m.end()
        m = _OPERATOR_RE.match(source, pos)
        if m is None:
            raise self.fail(f"unexpected char {source[pos]!r} at {pos}", pos)
        op = m.group()
        if op in _OPENERS:
            closers.append(_OPENERS[op])
        elif op in (")", "]", "}"):
            if not closers:
                raise self.fail(f"unexpected '{op}'", pos)
            expected = closers.pop()
            if expected != op:
                raise self.fail(f"unexpected '{op}', expected '{expected}'", pos)
        self.emit(OP, op, pos)
        return m.end()


def tokenize(source: str) -> list[Token]:
    """Split template source into tokens (see the module docstring)."""
    return Lexer(source).tokenize()
