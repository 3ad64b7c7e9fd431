"""The one exception the file-format code raises: `ModelFormatError`.

Every reader in `engine/` (GGUF, safetensors, the model-directory loader) turns a problem
with a file -- bad magic, a truncated header, an unknown tensor type, a missing tensor, a
shape that does not fit the config -- into this error, naming the file and the problem in
words. A caller (the CLI, the server at start-up) can print it as is; nobody ever sees a
numpy or struct traceback for a broken model file.

It subclasses `ValueError` so code that already catches "bad input" keeps working.
"""
from __future__ import annotations

import os


class ModelFormatError(ValueError):
    """A model file is malformed, truncated, unsupported or inconsistent."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
