"""A cursor over a template's tokens: look, take, skip and expect, with Jinja's error messages.

The expression parser (exprparser.py) and the statement parser (parser.py) read tokens the
same way; this is that way, apart from either grammar. An error names the line and column
of the token it stopped at, and describes tokens as Jinja does ("end of print statement").
"""

from __future__ import annotations

from .errors import TemplateSyntaxError
from .lexer import BLOCK_BEGIN, BLOCK_END, DATA, EOF, FLOAT, INT, NAME, OP, STRING, VAR_BEGIN, VAR_END, Token

_TOKEN_DESCRIPTIONS = {
    BLOCK_BEGIN: "begin of statement block", BLOCK_END: "end of statement block",
    VAR_BEGIN: "begin of print statement", VAR_END: "end of print statement",
    EOF: "end of template", STRING: "string", INT: "integer", FLOAT: "float", DATA: "template data",
}

def describe(token: Token) -> str:
    if token.kind in (NAME, OP):
        return str(token.value)
    return _TOKEN_DESCRIPTIONS.get(token.kind, token.kind)


class TokenCursor:
    """The token list, the position in it and the expression nesting depth."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.pos]

    def look(self) -> Token:
        return self.tokens[min(self.pos + 1, len(self.tokens) - 1)]

    def next(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind != EOF:
            self.pos += 1
        return token

    def is_op(self, value: str) -> bool:
        token = self.tokens[self.pos]
        return token.kind == OP and token.value == value

    def is_name(self, value: str) -> bool:
        token = self.tokens[self.pos]
        return token.kind == NAME and token.value == value

    def skip_op(self, value: str) -> bool:
        if self.is_op(value):
            self.pos += 1
            return True
        return False

    def skip_name(self, value: str) -> bool:
        if self.is_name(value):
            self.pos += 1
            return True
        return False

    def fail(self, message: str, token: Token | None = None) -> TemplateSyntaxError:
        token = token or self.current
        return TemplateSyntaxError(message, token.lineno, token.col)

    def expect(self, kind: str, value: str | None = None) -> Token:
        token = self.current
        if token.kind == kind and (value is None or token.value == value):
            return self.next()
        wanted = value if value is not None else _TOKEN_DESCRIPTIONS.get(kind, kind)
        if token.kind == EOF:
            raise self.fail(f"unexpected end of template, expected '{wanted}'.")
        raise self.fail(f"expected token '{wanted}', got '{describe(token)}'")

    def expect_name(self) -> str:
        return str(self.expect(NAME).value)
