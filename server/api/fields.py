"""Field validators shared by every endpoint: each returns the value or raises the ApiError
naming the field (`bad`: 400, `unsupported`: 422, both from server/errors.py).

    load_json_object(body)              the request body, a JSON object (400 invalid_json)
    number / integer / boolean          a field in range, or its default when absent or null
    model_name(doc)                     the required `model`
    token_ids(v, name)                  a list of non-negative token ids
"""
from __future__ import annotations

import json
import math
from typing import Any

from server.errors import ApiError, bad, unsupported

__all__ = ["bad", "boolean", "integer", "is_int", "is_number", "load_json_object", "model_name",
           "number", "token_ids", "unsupported"]
_MISSING = object()


def load_json_object(body: bytes) -> dict:
    try:
        document = json.loads(body.decode("utf-8"))
    except ValueError as exc:           # bad UTF-8, bad JSON, an integer of > 4,300 digits
        raise ApiError("invalid_json", f"We could not parse the JSON body of your request: {exc}")
    except RecursionError:
        raise ApiError("invalid_json", "The JSON body of your request is nested too deeply.")
    if not isinstance(document, dict):
        raise ApiError("invalid_json", "The request body must be a JSON object.")
    return document


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    return (is_int(v) or isinstance(v, float)) and math.isfinite(v)


def number(doc: dict, name: str, default: float, lo: float, hi: float, *,
           lo_open: bool = False) -> float:
    v = doc.get(name)
    if v is None:
        return default
    below = v <= lo if (is_number(v) and lo_open) else (is_number(v) and v < lo)
    if not is_number(v) or below or v > hi:
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise bad(name, f"{v!r} is not valid for '{name}': expected a number in {interval}.")
    return float(v)


def integer(doc: dict, name: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    v = doc.get(name)
    if v is None:
        return default
    if not is_int(v) or v < lo or (hi is not None and v > hi):
        upper = f" and <= {hi}" if hi is not None else ""
        raise bad(name, f"{v!r} is not valid for '{name}': expected an integer >= {lo}{upper}.")
    return v


def boolean(doc: dict, name: str, default: bool = False) -> bool:
    v = doc.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(name, f"{v!r} is not valid for '{name}': expected a boolean.")
    return v


def model_name(doc: dict) -> str:
    v = doc.get("model", _MISSING)
    if v is _MISSING or v is None:
        raise bad("model", "You must provide a model parameter.")
    if not isinstance(v, str):
        raise bad("model", f"{v!r} is not valid for 'model': expected a string.")
    return v


def token_ids(v: Any, name: str, *, limit: int | None = None) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(is_int(t) and t >= 0 for t in v):
        raise bad(name, f"'{name}' must be a list of non-negative integer token ids.")
    if limit is not None and len(v) > limit:
        raise bad(name, f"'{name}' allows at most {limit} entries.")
    return tuple(v)
