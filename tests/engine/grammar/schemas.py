"""Schemas the grammar tests (and bench/grammar_times.py) share: random ones from the served
keywords for the property tests; the fuzzer's, random and hostile, for the work budget; and
the one schema of every forced kind (keys in order, an enum, a const, a nested object) the
forced-draft tests read."""
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


FUZZ_SCHEMAS = 80                # random schemas after the hostile ones
WEATHER_SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "k": {"const": "abc"},
    "o": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
    "required": ["name", "unit", "k", "o"]}

# Bounds, patterns and sizes that made compiles take seconds (or forever) before the budget.
HOSTILE = [
    {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991},
    {"type": "number", "minimum": -1.7976931348623157e308, "maximum": 1.7976931348623157e308},
    {"type": "integer", "minimum": -(10 ** 300), "maximum": 10 ** 300},
    {"type": "string", "pattern": "^((a{1000}){1000})$"},
    {"type": "string", "pattern": "^(a?){1000}(b?){1000}$"},
    {"type": "string", "maxLength": 10 ** 9},
    {"type": "array", "items": {"type": "string", "maxLength": 1000}, "maxItems": 1000},
    {"enum": [str(i) * 20 for i in range(20_000)]},
    {"type": "integer", "multipleOf": 1, "minimum": -(10 ** 15), "maximum": 10 ** 15},
]


def random_fuzz_schema(rng: random.Random, depth: int = 0):
    """A random schema of the served keywords, with bounds and sizes from tame to hostile."""
    kind = rng.choice(["int", "num", "str", "fmt", "enum", "pat", "mult"] + (["obj", "arr", "rec"] if depth < 3 else []))
    big = 10 ** rng.randint(0, 40)
    if kind == "int":
        return {"type": "integer", "minimum": -rng.randint(0, big), "maximum": rng.randint(0, big)}
    if kind == "num":
        lo = rng.uniform(-big, big)
        return {"type": "number", rng.choice(["minimum", "exclusiveMinimum"]): lo,
                rng.choice(["maximum", "exclusiveMaximum"]): lo + rng.uniform(0.001, big)}
    if kind == "mult":
        return {"type": "integer", "multipleOf": rng.randint(1, 50), "minimum": -rng.randint(0, big)}
    if kind == "str":
        return {"type": "string", "minLength": rng.randint(0, 3), "maxLength": rng.randint(3, 10 ** rng.randint(1, 5))}
    if kind == "fmt":
        return {"type": "string", "format": rng.choice(["email", "uri", "uuid", "date-time", "ipv4", "hostname"])}
    if kind == "enum":
        return {"enum": [f"v{i}" for i in range(rng.randint(1, 10 ** rng.randint(0, 4)))]}
    if kind == "pat":
        n = rng.randint(1, 400)
        return {"type": "string", "pattern": rng.choice([f"^(ab{{1,{n}}})+$", f"^((x?){{{n}}})$", f"^[a-z]{{{n}}}$"])}
    if kind == "arr":
        return {"type": "array", "items": random_fuzz_schema(rng, depth + 1), "maxItems": rng.randint(1, 1000)}
    if kind == "rec":
        return {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,6}$"},
                "additionalProperties": random_fuzz_schema(rng, depth + 1)}
    names = [f"p{i}" for i in range(rng.randint(1, 12))]
    return {"type": "object", "properties": {n: random_fuzz_schema(rng, depth + 1) for n in names},
            "required": names[: rng.randint(0, len(names))], "additionalProperties": False}


def fuzz_schemas() -> list:
    """The fuzzer's fixed set: HOSTILE, then FUZZ_SCHEMAS random ones (seeded)."""
    rng = random.Random(9071)
    return HOSTILE + [random_fuzz_schema(rng) for _ in range(FUZZ_SCHEMAS)]
