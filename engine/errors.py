"""The engine's exceptions: a broken model file, and a request the engine will not take.

`ModelFormatError`: every reader in `engine/` (GGUF, safetensors, the model-directory
loader) turns a problem with a file -- bad magic, a truncated header, an unknown tensor
type, a missing tensor, a shape that does not fit the config -- into this error, naming the
file and the problem in words. A caller (the CLI, the server at start-up) can print it as
is; nobody ever sees a numpy or struct traceback for a broken model file. It subclasses
`ValueError` so code that already catches "bad file" keeps working.

`UnsupportedModel` (a `ModelFormatError`): the file is well formed but asks for maths this
engine does not implement (an architecture, a RoPE scaling type, soft-capping, an unknown
tensor...): fetching the file again will not help, a caller should say so.

`InvalidConfig`: an engine setting the engine will not run with (`EngineConfig`, its
`SpeculativeConfig`). `field` names the setting as the config spells it
(`speculative.prompt_lookup_min`), so a caller that reads settings from a file can name
the key in its own words; the engine's check is the one source of each rule.

`RequestRefused` and its kinds: `Engine.add_request` raises one of these, and only these,
for a request it will not take as it is. Each kind maps to one client error (the server's
table in `server/errors.py`); any other exception from the engine is a bug, and the server
answers it with a 500, never with a 400 it cannot justify.
"""
from __future__ import annotations

import os


class ModelFormatError(ValueError):
    """A model file is malformed, truncated, unsupported or inconsistent."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class UnsupportedModel(ModelFormatError):
    """A readable model file whose maths (architecture, key, tensor) is not implemented."""


class InvalidConfig(ValueError):
    """An engine setting is refused; `field` names it, `problem` says why in words."""

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class RequestRefused(Exception):
    """The engine will not take this request as it is (the client must change it)."""


class PromptTooLong(RequestRefused):
    """The prompt leaves no room in the model's context, or can never fit the KV cache.

    From the context rule (`engine.core.engine.check_context`) it carries the numbers a
    client message needs: the prompt's tokens, the completion tokens asked for, the limit."""

    def __init__(self, message: str, *, prompt_tokens: int = 0, completion_tokens: int = 0,
                 max_model_len: int = 0):
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.max_model_len = max_model_len


class InvalidRequest(RequestRefused):
    """The request is malformed for the engine (an empty prompt, an empty input)."""


class InputTooLong(PromptTooLong):
    """One input of an embedding batch is longer than the encoder's max_seq_length (and
    truncation was not asked): `input_index` names it, `prompt_tokens` its token count."""

    def __init__(self, input_index: int, n_tokens: int, max_tokens: int):
        super().__init__(f"input {input_index} has {n_tokens} tokens, more than the model's "
                         f"maximum of {max_tokens} (ask for truncation to cut it)",
                         prompt_tokens=n_tokens, max_model_len=max_tokens)
        self.input_index = input_index
