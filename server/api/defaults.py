"""Server-side sampling defaults: what a request that omits a field gets.

Precedence, lowest to highest (vLLM reads the model's generation config the same way):

    built-in (OpenAI's: temperature 1, top_p 1, ... max_tokens unset)
    < the model directory's `generation_config.json` (temperature, top_p, top_k, min_p,
      repetition_penalty, max_new_tokens -> max_tokens)
    < runtime.toml's `[defaults]` table
    < environment variables `TL_DEFAULTS__<KEY>` (e.g. TL_DEFAULTS__MAX_TOKENS=256)

A `max_tokens` default applies to chat and to completions (replacing completions' built-in
16). The values are checked with the same ranges the API enforces on a request, so a default
can never be something a client could not have sent.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

DEFAULTS_ENV_PREFIX = "TL_DEFAULTS__"
GENERATION_CONFIG = "generation_config.json"
# generation_config.json name -> our key (the Hugging Face names; max_new_tokens is theirs)
HF_NAMES = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
            "min_p": "min_p", "repetition_penalty": "repetition_penalty",
            "max_new_tokens": "max_tokens"}


class DefaultsError(ValueError):
    """A default was refused; the message names where it came from and the key."""


@dataclass(frozen=True, kw_only=True)
class SamplingDefaults:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                       # 0 = off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int | None = None        # None: chat runs to the context limit, completions 16

    def changed(self) -> dict[str, Any]:
        """The fields that differ from the built-in defaults (for the start-up log)."""
        base = SamplingDefaults()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(base, f.name)}


# key -> (kind, lowest, highest, lowest excluded?): the API's own ranges (server/api/generation.py)
RANGES: dict[str, tuple[type, float, float, bool]] = {
    "temperature": (float, 0.0, 2.0, False),
    "top_p": (float, 0.0, 1.0, True),
    "top_k": (int, 0, math.inf, False),
    "min_p": (float, 0.0, 1.0, False),
    "repetition_penalty": (float, 0.0, 10.0, True),
    "max_tokens": (int, 1, math.inf, False),
}


def check(where: str, name: str, value: Any) -> float | int:
    """One default value, checked against the API's range; `where` prefixes the message."""
    if name not in RANGES:
        raise DefaultsError(f"{where}{name}: unknown key (known: {', '.join(RANGES)})")
    kind, lo, hi, lo_open = RANGES[name]
    is_int = isinstance(value, int) and not isinstance(value, bool)
    ok_kind = is_int or (kind is float and isinstance(value, float) and math.isfinite(value))
    below = value <= lo if lo_open else value < lo
    if not ok_kind or below or value > hi:
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        wanted = "an integer" if kind is int else "a number"
        raise DefaultsError(f"{where}{name}: expected {wanted} in {interval}, got {value!r}")
    return float(value) if kind is float else value


def from_table(table: Mapping[str, Any], where: str = "[defaults].") -> dict[str, Any]:
    return {name: check(where, name, value) for name, value in table.items()}


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for var, text in env.items():
        if not var.startswith(DEFAULTS_ENV_PREFIX):
            continue
        name = var[len(DEFAULTS_ENV_PREFIX):].lower()
        kind = RANGES.get(name, (float,))[0]
        try:
            value = int(text.strip()) if kind is int else float(text.strip())
        except ValueError:
            raise DefaultsError(f"{var}: expected a number, got {text!r}") from None
        values[name] = check(f"{var}: ", name, value)
    return values


def from_generation_config(model_dir: str | Path) -> dict[str, Any]:
    """The sampling values of `model_dir/generation_config.json`, {} when it has none.

    Values outside the API's ranges are skipped, not fatal: the file belongs to the model's
    authors, and the server must still start (the log says what was taken)."""
    path = Path(model_dir)
    path = (path.parent if path.is_file() else path) / GENERATION_CONFIG
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict):
        return {}
    values = {}
    for hf_name, name in HF_NAMES.items():
        if document.get(hf_name) is None:
            continue
        try:
            values[name] = check("", name, document[hf_name])
        except DefaultsError:
            continue
    return values


def resolve(model_dir: str | Path, configured: Mapping[str, Any]) -> SamplingDefaults:
    """generation_config.json's values, then the configured ones (table + environment)."""
    values = {**from_generation_config(model_dir), **configured}
    return replace(SamplingDefaults(), **values)
