"""The template package's exception hierarchy.

Every failure a template can cause is one of these, so callers (the model loader, the
server) catch `TemplateError` and never a bare Python exception:

- `TemplateSyntaxError`: the source is not valid template text. Raised by `Template.parse`,
  i.e. when a model loads, never while serving a request. Carries 1-based `lineno`/`col`.
- `TemplateRuntimeError`: rendering failed (an undefined value used where a value is
  needed, a type error, a sandbox violation, a limit). `.message` is the bare reason.
- `TemplateRaised`: the template itself called `raise_exception(msg)` (for instance
  "Conversation roles must alternate ..."). `.message` is the template's text verbatim,
  which the server returns to the client with status 400.
"""

from __future__ import annotations


class TemplateError(Exception):
    """Base of every template failure; `.message` is the human-readable reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TemplateSyntaxError(TemplateError):
    """Invalid template source, located at 1-based `lineno` and `col`."""

    def __init__(self, message: str, lineno: int, col: int) -> None:
        super().__init__(message)
        self.lineno = lineno
        self.col = col

    def __str__(self) -> str:
        return f"{self.message} (line {self.lineno}, column {self.col})"


class TemplateRuntimeError(TemplateError):
    """A failure while rendering; `lineno` is the statement's line when known."""

    def __init__(self, message: str, lineno: int | None = None) -> None:
        super().__init__(message)
        self.lineno = lineno

    def __str__(self) -> str:
        if self.lineno is None:
            return self.message
        return f"{self.message} (line {self.lineno})"


class UndefinedValueError(TemplateRuntimeError):
    """An undefined name, attribute or item was used where a value is required."""


class TemplateSecurityError(TemplateRuntimeError):
    """The sandbox refused an operation (private attribute, unsafe method)."""


class TemplateLimitError(TemplateRuntimeError):
    """A named resource limit (iterations, call depth, output size, range) was exceeded."""


class TemplateRaised(TemplateError):
    """The template called `raise_exception(message)`; `.message` is verbatim."""
