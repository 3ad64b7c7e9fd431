"""Compile limits of the grammar room: nested schemas compile to a size linear in their depth
(a reused sub-schema is one called rule, never a copy), a schema nested past
MAX_SCHEMA_DEPTH and a grammar past MAX_COMPILE_WORK are refused with the limit named, and
a document as deep as the limit still fits the run-time stack (tail calls take no frame).
Timing lives in bench/structured.py (`deep_array_ms`); these tests assert correctness only."""
from __future__ import annotations

import json

import pytest

from engine.grammar.automaton import DEAD, Matcher
from engine.grammar.budget import MAX_COMPILE_WORK
from engine.grammar.compile import GrammarCache, GrammarSpec, schema_spec
from engine.grammar.errors import GrammarInvalid
from engine.grammar.json_schema import MAX_SCHEMA_DEPTH


def compiled(schema):
    return GrammarCache().get(schema_spec(schema))


def accepts(schema, doc) -> bool:
    m = Matcher(compiled(schema))
    state = m.step_bytes(m.initial, json.dumps(doc).encode("utf-8"))
    return state != DEAD and m.accepts(state)


def size(schema) -> int:
    return sum(len(rule.char_edges) for rule in compiled(schema).rules)


def nested_arrays(levels: int, **bounds):
    """`levels` nested schemas: arrays around an integer, and the document that fills them."""
    schema, doc = {"type": "integer"}, 1
    for _ in range(levels - 1):
        schema, doc = {"type": "array", "items": schema, **bounds}, [doc]
    return schema, doc


def nested_objects(levels: int):
    """Objects whose nested member comes after three optional ones (an after-rule chain)."""
    schema, doc = {"type": "integer"}, 1
    for _ in range(levels - 1):
        schema = {"type": "object", "required": ["child"], "properties": {
            "a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"},
            "child": schema}}
        doc = {"a": "x", "b": 2, "c": True, "child": doc}
    return schema, doc


def nested_optional_models(levels: int):
    """pydantic's Optional[Model] chain: anyOf + $ref per model, three schema levels each."""
    models = levels // 3
    defs = {f"M{i}": {"type": "object", "properties": {
        "name": {"type": "string"},
        "next": {"anyOf": [{"$ref": f"#/$defs/M{i + 1}"}, {"type": "null"}]} if i + 1 < models else {"type": "null"}}}
        for i in range(models)}
    doc: dict = {"name": "z", "next": None}
    for _ in range(models - 1):
        doc = {"name": "n", "next": doc}
    return {"$defs": defs, "$ref": "#/$defs/M0"}, doc


def test_nested_arrays_and_objects_compile_linearly():
    for make in (nested_arrays, nested_objects):
        small, large = size(make(8)[0]), size(make(16)[0])
        assert large <= 2.5 * small, (make.__name__, small, large)       # copies grew 4x per level
    bounded = [size(nested_arrays(n, maxItems=3)[0]) for n in (6, 12)]
    assert bounded[1] <= 2.5 * bounded[0]


@pytest.mark.parametrize("make", [nested_arrays, nested_objects, nested_optional_models])
def test_a_document_as_deep_as_the_limit_is_accepted(make):
    schema, doc = make(MAX_SCHEMA_DEPTH)
    assert accepts(schema, doc)
    assert not accepts(schema, {"unexpected": doc})


def test_minimum_items_are_kept_at_the_limit():
    schema, doc = nested_arrays(MAX_SCHEMA_DEPTH, minItems=1)
    assert accepts(schema, doc) and accepts(schema, [doc[0], doc[0]])
    inner = doc
    for _ in range(MAX_SCHEMA_DEPTH - 3):
        inner = inner[0]
    inner.clear()                                   # an empty array deep inside breaks minItems
    assert not accepts(schema, doc)


@pytest.mark.parametrize("levels", [MAX_SCHEMA_DEPTH + 1, 50])
def test_a_schema_past_the_depth_limit_names_the_limit_and_the_path(levels):
    schema, _ = nested_arrays(levels)
    with pytest.raises(GrammarInvalid) as err:
        compiled(schema)
    assert "MAX_SCHEMA_DEPTH" in err.value.message and str(MAX_SCHEMA_DEPTH) in err.value.message
    assert err.value.path == "$" + ".items" * MAX_SCHEMA_DEPTH
    assert err.value.path in err.value.message


def test_the_depth_limit_counts_refs_and_tool_parameters():
    schema, _ = nested_optional_models(MAX_SCHEMA_DEPTH + 3)
    with pytest.raises(GrammarInvalid, match="MAX_SCHEMA_DEPTH"):
        compiled(schema)
    from engine.grammar.compile import CallSyntax
    deep, _ = nested_arrays(MAX_SCHEMA_DEPTH + 1)
    spec = GrammarSpec("tool_calls", tools=(("f", json.dumps({"type": "object", "properties": {"x": deep}})),),
                       call_syntax=CallSyntax(begin="<tool_call>", end="</tool_call>"))
    with pytest.raises(GrammarInvalid) as err:
        GrammarCache().get(spec)
    assert err.value.path.startswith("$.tools[f].parameters.properties.x.items")


@pytest.mark.parametrize("spec", [GrammarSpec("regex", "((a{1000}){1000}){1000}"),
                                  GrammarSpec("regex", "((a?){1000}){5}"),
                                  schema_spec({"type": "string", "pattern": "^(b{1000}){1000}$"})])
def test_a_grammar_past_the_compile_work_limit_is_refused(spec):
    with pytest.raises(GrammarInvalid) as err:
        GrammarCache().get(spec)
    assert "MAX_COMPILE_WORK" in err.value.message and f"{MAX_COMPILE_WORK}" in err.value.message
