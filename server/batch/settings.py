"""The `[batch]` table of runtime.toml: where the Batch API keeps its files, and its bounds.

    [batch]
    dir = "batch-data"       # the uploads, outputs and batch states ("" = the API is off)
    max_file_mib = 8         # the largest upload (written to disk as it arrives)
    max_dir_mib = 1024       # files and outputs together; an upload past it is refused
    max_running = 8          # batch requests in flight at once

Each key may be overridden from the environment as `TL_BATCH__<KEY>` (upper case); a key
or variable naming nothing here is refused by name, as `[engine]`'s are. A relative `dir`
in a config file is read against the file's directory.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

ENV_PREFIX = "TL_BATCH__"


class BatchConfigError(ValueError):
    """A `[batch]` key or value refused; the message names it."""


@dataclass(frozen=True)
class BatchConfig:
    dir: str = ""                  # "" = off: the /v1/files and /v1/batches routes answer 404
    max_file_mib: int = 8
    max_dir_mib: int = 1024
    max_running: int = 8

    @property
    def is_on(self) -> bool:
        return bool(self.dir)


_INT_KEYS = ("max_file_mib", "max_dir_mib", "max_running")


def batch_config(table: Any, env: Mapping[str, str],
                 base_dir: str | os.PathLike | None = None) -> BatchConfig:
    """The `[batch]` table (a dict, or absent: `{}`) with its environment overrides."""
    if not isinstance(table, dict):
        raise BatchConfigError("[batch] must be a table")
    values = {name: _checked(name, value) for name, value in table.items()}
    if base_dir is not None and values.get("dir") and not Path(values["dir"]).is_absolute():
        values["dir"] = str(Path(base_dir) / values["dir"])
    for var, text in env.items():
        if not var.startswith(ENV_PREFIX):
            continue
        name = var[len(ENV_PREFIX):].lower()
        if name == "dir":
            values[name] = text
        elif name in _INT_KEYS:
            try:
                number = int(text.strip())
            except ValueError:
                raise BatchConfigError(f"{var} ([batch].{name}): expected an integer, "
                                       f"got {text!r}") from None
            values[name] = _checked(name, number)
        else:
            raise BatchConfigError(f"{var}: unknown key [batch].{name}")
    return replace(BatchConfig(), **values)


def _checked(name: str, value: Any) -> Any:
    if name not in {f.name for f in fields(BatchConfig)}:
        raise BatchConfigError(f"[batch].{name}: unknown key")
    if name == "dir":
        if not isinstance(value, str):
            raise BatchConfigError(f"[batch].dir: expected a path, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BatchConfigError(f"[batch].{name}: expected an integer >= 1, got {value!r}")
    return value
