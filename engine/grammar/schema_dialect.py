"""The JSON Schema dialect the grammar compiler serves: its keywords by type, the annotations
it ignores, the JSON type of a value, and a schema's canonical text (its cache key).

json_schema.py walks a schema with these tables; keeping them apart lets a reader see at a
glance which keywords are served without reading the compiler.
"""
from __future__ import annotations

import json

ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id",
                         "$comment", "readOnly", "writeOnly", "deprecated", "$defs",
                         "definitions", "discriminator"})
KEYWORDS = {
    "any": {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable"},
    "object": {"properties", "required", "additionalProperties", "propertyNames"},
    "array": {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"},
    "string": {"minLength", "maxLength", "pattern", "format"},
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
}
NUMBER_BOUNDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
PROPERTY_NAME_KEYWORDS = frozenset({"type", "enum", "const", "pattern", "format", "minLength", "maxLength"})
SERVED = frozenset().union(*KEYWORDS.values()) | ANNOTATIONS
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if is_int(v):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(v), "?")


def canonical(schema) -> str:
    """The cache key of a schema: its compact JSON text. Keys keep their order: the order of
    `properties` is the order the output writes them in."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
