"""Random JSON schemas from the served keywords, for the grammar property tests."""
from __future__ import annotations

import random


def random_schema(rng: random.Random, depth: int = 0):
    """A random schema from the served keywords; strings and arrays bounded (the tiny model
    would otherwise write for longer than its 512-token context)."""
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "format", "pattern", "anyOf"]
    if depth < 2:
        kinds += ["object", "object", "array"]
    kind = rng.choice(kinds)
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(0, 6), "minLength": rng.randint(0, 1)}
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 500)}
    if kind == "number":
        return {"type": "number"}
    if kind in ("boolean", "null"):
        return {"type": kind}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", 3, None, True, "x y"], rng.randint(1, 4))}
    if kind == "format":
        return {"type": "string", "format": rng.choice(["date", "time", "date-time", "uuid"])}
    if kind == "pattern":
        return {"type": "string", "pattern": rng.choice([r"^[a-z]{1,4}-\d{2}$", r"^(ab|cd)+$", r"^\w{2,5}$"])}
    if kind == "anyOf":
        return {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "null"}]}
    if kind == "array":
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": rng.randint(0, 1),
                "maxItems": rng.randint(1, 3)}
    names = rng.sample(["id", "name", "when", "tags", "ok", "score"], rng.randint(1, 4))
    props = {n: random_schema(rng, depth + 1) for n in names}
    required = [n for n in names if rng.random() < 0.6]
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
