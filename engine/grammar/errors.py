"""The grammar's refusals: a schema or pattern that is wrong, or one this compiler does not serve.

Both subclass the engine's `RequestRefused`, so the server's one error table decides the
status: `GrammarInvalid` is the client's mistake (400), `GrammarUnsupported` a valid
schema using a keyword this compiler does not serve (422). Both name the keyword and the
JSON-pointer-like path (`$.properties.age.multipleOf`) where it was found.
"""
from __future__ import annotations

from engine.errors import RequestRefused


class GrammarError(RequestRefused):
    def __init__(self, message: str, *, path: str = "$", keyword: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.keyword = keyword

    def copy(self) -> "GrammarError":
        """The same refusal as a fresh exception (a cached refusal is raised once per request)."""
        return type(self)(self.message, path=self.path, keyword=self.keyword)


class GrammarInvalid(GrammarError):
    """Not a valid JSON Schema / regex (or unsatisfiable as written)."""


class GrammarUnsupported(GrammarError):
    """Valid, but uses a keyword or construct this compiler does not serve."""
