"""Structured outputs at the API edge: `response_format`, vLLM's `guided_*` and
`structured_outputs` -> one validated `Structured` (which grammar, named by its field).

    response_format: {"type": "text"}                                   -> none (a no-op)
                     {"type": "json_object"}                            -> any JSON object
                     {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
    guided_json / guided_regex / guided_choice                          (vLLM extras)
    structured_outputs: {"json" | "regex" | "choice": ...}               (vLLM's newer form)

At most one of them per request (two: 422). `compile_structured` compiles through the
served model's `GrammarCache` (once per canonical text, a refusal too: a retried schema
that is too large or unserved costs no second compile) and turns the grammar's refusals
into API errors: an invalid schema or pattern is a 400 naming the field, a keyword this
server does not serve a 422 naming the keyword and its path. Nothing reaches the engine
unvalidated.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from engine.api import GrammarCache, GrammarInvalid, GrammarSpec, GrammarUnsupported, schema_spec
from server.errors import ApiError, bad

GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_choice")
MAX_CHOICES = 256


@dataclass(frozen=True)
class Structured:
    param: str                  # the request field it came from (errors name it)
    spec: GrammarSpec


def _schema(value, param: str) -> GrammarSpec:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):        # not JSON, or nested too deeply
            raise bad(param, f"'{param}' must be a JSON Schema (an object, or its JSON text).") from None
    if not isinstance(value, (dict, bool)):
        raise bad(param, f"'{param}' must be a JSON Schema object.")
    return schema_spec(value)


def _regex(value, param: str) -> GrammarSpec:
    if not isinstance(value, str) or not value:
        raise bad(param, f"'{param}' must be a non-empty regular expression string.")
    return GrammarSpec("regex", value)


def _choice(value, param: str) -> GrammarSpec:
    if not isinstance(value, list) or not value or len(value) > MAX_CHOICES \
            or not all(isinstance(c, str) and c for c in value):
        raise bad(param, f"'{param}' must be a list of 1..{MAX_CHOICES} non-empty strings.")
    return GrammarSpec("choice", json.dumps(value, ensure_ascii=False))


def _response_format(rf) -> Structured | None:
    param = "response_format"
    if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise bad(param, "'response_format.type' must be 'text', 'json_object' or 'json_schema'.")
    if rf["type"] == "text":
        return None
    if rf["type"] == "json_object":
        return Structured(param, GrammarSpec("json_object"))
    js = rf.get("json_schema")
    if not isinstance(js, dict) or not isinstance(js.get("name"), str):
        raise bad(f"{param}.json_schema", "'response_format.json_schema' must be an object with a "
                                           "'name' and a 'schema'.")
    if "schema" not in js:
        return Structured(param, GrammarSpec("json_object"))       # OpenAI: no schema, any object
    if js.get("strict") is not None and not isinstance(js["strict"], bool):
        raise bad(f"{param}.json_schema.strict", "'strict' must be a boolean.")
    return Structured(f"{param}.json_schema.schema", _schema(js["schema"], f"{param}.json_schema.schema"))


_MAKERS = {"json": _schema, "regex": _regex, "choice": _choice}


def parse_structured(doc: dict) -> Structured | None:
    """The request's one structured-output constraint, or None."""
    found: list[Structured | None] = []
    names = []
    if doc.get("response_format") is not None:
        found.append(_response_format(doc["response_format"]))
        names.append("response_format")
    for name in GUIDED_FIELDS:
        if doc.get(name) is not None:
            found.append(Structured(name, _MAKERS[name.split("_")[1]](doc[name], name)))
            names.append(name)
    so = doc.get("structured_outputs")
    if so is not None:
        keys = [k for k in _MAKERS if isinstance(so, dict) and so.get(k) is not None]
        if len(keys) != 1:
            raise bad("structured_outputs", "'structured_outputs' must hold exactly one of "
                                             "'json', 'regex', 'choice'.")
        param = f"structured_outputs.{keys[0]}"
        found.append(Structured(param, _MAKERS[keys[0]](so[keys[0]], param)))
        names.append("structured_outputs")
    if len(names) > 1:
        raise ApiError("unsupported_parameter", f"Only one structured-output constraint per request; "
                                                f"got {', '.join(names)}.", param=names[1])
    return found[0] if found else None


def compile_structured(cache: GrammarCache, structured: Structured):
    """-> the compiled grammar; 400 for an invalid schema/pattern, 422 for an unserved keyword."""
    try:
        return cache.get(structured.spec)
    except GrammarUnsupported as exc:
        raise ApiError("unsupported_parameter", f"{exc.message} (path {exc.path}, in '{structured.param}').",
                       param=structured.param) from None
    except GrammarInvalid as exc:
        raise bad(structured.param, f"Invalid schema or pattern in '{structured.param}': {exc.message}.") \
            from None
