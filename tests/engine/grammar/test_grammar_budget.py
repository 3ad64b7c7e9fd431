"""One budget for a whole compile: every stage (the schema walk, digit ranges, patterns, the
automaton) pays from the compile's `WorkBudget`, a seeded fuzzer of random and hostile
schemas either compiles or is refused within it (and, under the timing marker, within a
second of wall clock), refusals are cached like grammars, and the cache serves threads."""
from __future__ import annotations

import json
import random
import threading
import time

import pytest
from jsonschema import Draft202012Validator

from engine.grammar.budget import MAX_COMPILE_WORK, WorkBudget
from engine.grammar.compile import GrammarCache, GrammarSpec, compile_spec, schema_spec
from engine.grammar.errors import GrammarError, GrammarInvalid
from engine.grammar.json_schema import SchemaCompiler
from tests.engine.grammar.grammar_sampling import sample_texts

FUZZ_SCHEMAS = 80
MAX_FUZZ_COMPILE_S = 1.0


def walk_cost(schema) -> int:
    """Units the schema walk alone spends (no automaton built)."""
    compiler = SchemaCompiler(schema, WorkBudget())
    compiler.value(schema, "$")
    return compiler.budget.spent


def test_the_schema_walk_pays_for_digits_enums_and_patterns():
    assert walk_cost({"type": "integer", "maximum": 10 ** 40}) > walk_cost({"type": "integer", "maximum": 10 ** 4})
    assert walk_cost({"type": "number", "minimum": 0.123456789}) > walk_cost({"type": "number", "minimum": 0.1})
    assert walk_cost({"enum": list(range(500))}) > 10 * walk_cost({"enum": list(range(5))})
    assert walk_cost({"type": "string", "pattern": "a" * 400}) > walk_cost({"type": "string", "pattern": "a"}) + 400
    with pytest.raises(GrammarInvalid, match="MAX_COMPILE_WORK"):     # refused in the walk, before any automaton
        walk_cost({"enum": list(range(100_000))})


def test_refusals_are_cached_like_grammars():
    cache = GrammarCache()
    spec = GrammarSpec("regex", "((a{1000}){1000}){1000}")
    errors = []
    for _ in range(3):
        with pytest.raises(GrammarInvalid) as err:
            cache.get(spec)
        errors.append(err.value)
    assert cache.compiles == 1 and "MAX_COMPILE_WORK" in errors[0].message
    assert len({id(e) for e in errors}) == 3 and len({e.message for e in errors}) == 1


def test_the_cache_serves_many_threads_one_grammar_per_spec():
    cache = GrammarCache()
    specs = [schema_spec({"type": "integer", "minimum": 0, "maximum": n}) for n in range(1, 6)]
    start = threading.Barrier(8)
    results: list[list] = [[] for _ in range(8)]

    def worker(i: int) -> None:
        start.wait()
        results[i] = [cache.get(s) for s in specs * 3]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results:
        assert [g is first for g, first in zip(got, results[0])] == [True] * len(specs) * 3
    assert len(specs) <= cache.compiles <= len(specs) * 8


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


def fuzz_schemas():
    rng = random.Random(9071)
    return HOSTILE + [random_fuzz_schema(rng) for _ in range(FUZZ_SCHEMAS)]


def test_fuzzed_schemas_compile_or_are_refused_within_the_budget():
    compiled = refused = 0
    for schema in fuzz_schemas():
        budget = WorkBudget()
        try:
            grammar = compile_spec(schema_spec(schema), budget)
        except GrammarError:
            refused += 1
            continue
        assert budget.spent <= MAX_COMPILE_WORK
        compiled += 1
        validator = Draft202012Validator(schema)
        for text in sample_texts(grammar, 2, seed=compiled):
            assert validator.is_valid(json.loads(text)), (json.dumps(schema)[:200], text[:200])
    assert compiled > FUZZ_SCHEMAS // 2 and refused >= 3


@pytest.mark.timing
def test_no_fuzzed_compile_takes_a_second():
    worst_s, worst = 0.0, None
    for schema in fuzz_schemas():
        start = time.perf_counter()
        try:
            compile_spec(schema_spec(schema))
        except GrammarError:
            pass
        took = time.perf_counter() - start
        if took > worst_s:
            worst_s, worst = took, schema
    assert worst_s < MAX_FUZZ_COMPILE_S, (worst_s, json.dumps(worst)[:300])
