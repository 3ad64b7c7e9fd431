"""The schemas Zod 4 and pydantic 2 write for everyday models (tests/engine/grammar/
library_schemas.py) compile with a small part of the work budget, and every sampled output
validates (jsonschema with its format checker). Their compile times on the wall clock are
bench/grammar_times.py's to measure."""
from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from engine.grammar.budget import MAX_COMPILE_WORK, WorkBudget
from engine.grammar.compile import compile_spec, schema_spec
from tests.engine.grammar.grammar_sampling import sample_texts
from tests.engine.grammar.library_schemas import ZOD_DIR, library_schemas

# Work units a library schema's compile may spend: a quarter of the budget, about the 100 ms
# bench/grammar_times.py holds them to (a unit is near a microsecond of CPython:
# engine/grammar/budget.py). The largest, Zod's user model, spends about 63 000.
LIBRARY_WORK = MAX_COMPILE_WORK // 4


def library_params():
    return [pytest.param(schema, id=name) for name, schema in library_schemas()]


def test_the_fixtures_cover_a_dozen_zod_models():
    assert len(list(ZOD_DIR.glob("*.json"))) >= 12


@pytest.mark.parametrize("schema", library_params())
def test_library_schemas_compile_and_every_output_validates(schema):
    grammar = compile_spec(schema_spec(schema))
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    for text in sample_texts(grammar, 25, seed=3):
        errors = list(validator.iter_errors(json.loads(text)))
        assert not errors, (text, errors[0].message)


@pytest.mark.parametrize("schema", library_params())
def test_library_schemas_compile_with_a_quarter_of_the_budget(schema):
    """Counted, not timed: the units every stage of the compile spent (no cache here)."""
    budget = WorkBudget()
    compile_spec(schema_spec(schema), budget)
    assert 0 < budget.spent < LIBRARY_WORK, budget.spent
