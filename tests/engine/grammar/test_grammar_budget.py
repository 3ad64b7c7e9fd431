"""One budget for a whole compile: every stage (the schema walk, digit ranges, patterns, the
automaton) pays from the compile's `WorkBudget`, a seeded fuzzer of random and hostile
schemas either compiles or is refused within it, refusals are cached like grammars, and the
cache serves threads. (How long the fuzzer's worst compile takes on the wall clock is
bench/grammar_times.py's to measure.)"""
from __future__ import annotations

import json
import threading

import pytest
from jsonschema import Draft202012Validator

from engine.grammar.budget import MAX_COMPILE_WORK, WorkBudget
from engine.grammar.compile import GrammarCache, GrammarSpec, compile_spec, schema_spec
from engine.grammar.errors import GrammarError, GrammarInvalid
from engine.grammar.json_schema import SchemaCompiler
from tests.engine.grammar.grammar_sampling import sample_texts
from tests.engine.grammar.schemas import FUZZ_SCHEMAS, fuzz_schemas


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
