"""Numbers as clients bound them: integer ranges as wide as Zod's +-(2^53-1) compile with little
work, bounded `number`s allow fractions inside the bounds and nothing outside (a property
test against jsonschema over random bounds), exclusive bounds exclude their ends in every
spelling, and integer `multipleOf` is served."""
from __future__ import annotations

import json
import random

import jsonschema
import pytest

from engine.grammar.budget import WorkBudget
from engine.grammar.compile import compile_spec, schema_spec
from engine.grammar.errors import GrammarInvalid, GrammarUnsupported
from tests.engine.grammar.grammar_sampling import accepts, sample_texts

ZOD_INT = {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991}
ZOD_INT_WORK = 20_000           # work units the Zod int schema may cost (the old digit pairs took ~10^6)


def compiled(schema, budget: WorkBudget | None = None):
    return compile_spec(schema_spec(schema), budget)


def test_zods_safe_integer_bounds_compile_with_little_work():
    budget = WorkBudget()
    grammar = compiled({"type": "object", "properties": {"n": ZOD_INT}, "required": ["n"]}, budget)
    assert budget.spent < ZOD_INT_WORK, budget.spent
    for good in ['{"n": 0}', '{"n": -42}', '{"n": 999999999999999}', '{"n": -999999999999999}']:
        assert accepts(grammar, good), good
    for bad in ['{"n": 1.5}', '{"n": -0}', '{"n": 01}']:
        assert not accepts(grammar, bad), bad


@pytest.mark.parametrize("bound", [2 ** 31, 10 ** 12, 2 ** 53 - 1, 10 ** 40])
def test_wide_integer_bounds_compile_with_little_work(bound):
    """Counted, not timed (bench/grammar_times.py times them): the work grows with the
    bounds' digits, not with the range's size."""
    budget = WorkBudget()
    compiled({"type": "integer", "minimum": -bound, "maximum": bound}, budget)
    assert 0 < budget.spent < ZOD_INT_WORK, (bound, budget.spent)


@pytest.mark.parametrize("lo,hi", [(-9007199254740991, 9007199254740991), (95, 1234), (-1234, -95),
                                   (0, 0), (-7, 7), (123456789012, 123456789999), (10 ** 20, 10 ** 20 + 5)])
def test_integer_ranges_are_exact_near_their_ends(lo, hi):
    grammar = compiled({"type": "integer", "minimum": lo, "maximum": hi})
    for v in (lo, lo + 1, hi - 1, hi, (lo + hi) // 2):
        if lo <= v <= hi and len(str(abs(v))) <= 15 or v in (lo, hi) and abs(v) < 10 ** 15:
            assert accepts(grammar, str(v)), v
    for v in (lo - 1, hi + 1, lo - 10, hi + 10):
        assert not accepts(grammar, str(v)), v


def test_unit_interval_allows_fractions_and_exclusive_ends_exclude_every_spelling():
    closed = compiled({"type": "number", "minimum": 0, "maximum": 1})
    assert all(accepts(closed, t) for t in ["0.5", "0", "1", "1.0", "0.25", "0.999"])
    assert not any(accepts(closed, t) for t in ["1.01", "-0.5", "2", "1e0", "-0"])
    open_ = compiled({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})
    assert accepts(open_, "0.5") and accepts(open_, "0.0001")
    assert not any(accepts(open_, t) for t in ["0", "1", "0.0", "1.0", "1e0", "0.000", "-0.0", "1.00"])
    lower_only = compiled({"type": "number", "minimum": 0})
    assert accepts(lower_only, "0.73") and not accepts(lower_only, "-0.5")
    assert any("." in t for t in sample_texts(closed, 40, seed=1))         # fractions are actually written


def random_bound(rng: random.Random):
    kind = rng.random()
    if kind < 0.3:
        return rng.randint(-1000, 1000)
    if kind < 0.6:
        return round(rng.uniform(-1000, 1000), rng.randint(0, 4))
    if kind < 0.8:
        return rng.choice([0, 1, -1, 0.5, -0.5, 0.1, 0.3, 1e-7, 123456.789, 0.30000000000000004])
    return rng.choice([1, -1]) * rng.uniform(0, 10 ** rng.randint(0, 20))


def random_number_schema(rng: random.Random) -> dict:
    schema = {"type": rng.choice(["number", "number", "integer"])}
    lo, hi = sorted([random_bound(rng), random_bound(rng)])
    if rng.random() < 0.8:
        schema["exclusiveMinimum" if rng.random() < 0.4 else "minimum"] = lo
    if rng.random() < 0.8:
        schema["exclusiveMaximum" if rng.random() < 0.4 else "maximum"] = hi
    return schema


def test_property_random_bounds_sample_only_valid_numbers():
    rng = random.Random(20261201)
    checked = 0
    for _ in range(300):
        schema = random_number_schema(rng)
        try:
            grammar = compiled(schema)
        except GrammarInvalid:                       # an empty interval: check that it is empty
            lo = schema.get("minimum", schema.get("exclusiveMinimum"))
            hi = schema.get("maximum", schema.get("exclusiveMaximum"))
            assert lo is not None and hi is not None and hi - lo <= 1, schema
            continue
        validator = jsonschema.Draft202012Validator(schema)
        for text in sample_texts(grammar, 12, seed=checked):
            assert validator.is_valid(json.loads(text)), (schema, text)
            checked += 1
    assert checked > 2000


def test_integer_multiple_of_is_served_and_fractional_is_refused():
    grammar = compiled({"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100})
    assert accepts(grammar, "55") and accepts(grammar, "100") and accepts(grammar, "0")
    assert not accepts(grammar, "7") and not accepts(grammar, "105") and not accepts(grammar, "-5")
    unbounded = compiled({"type": "number", "multipleOf": 3})
    texts = sample_texts(unbounded, 50)
    assert all(int(t) % 3 == 0 for t in texts) and len(set(texts)) > 10
    assert accepts(unbounded, "-300") and not accepts(unbounded, "301")
    with pytest.raises(GrammarUnsupported) as err:
        compiled({"type": "number", "multipleOf": 0.01})
    assert err.value.keyword == "multipleOf"
    with pytest.raises(GrammarInvalid):
        compiled({"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 6})
