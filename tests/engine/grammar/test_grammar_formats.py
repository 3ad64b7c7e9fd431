"""String formats, patterns, lengths and property names as Zod and pydantic write them: every
format's outputs pass jsonschema's format checker (or, for the formats it has no checker
for, a strict parse), match the pattern a library emits next to the format, and lengths and
`propertyNames` hold; combinations the compiler cannot prove are refused with a 422 kind."""
from __future__ import annotations

import json
import urllib.parse

import idna
import pytest
import regex
from jsonschema import Draft202012Validator

from engine.grammar.compile import compile_spec, schema_spec
from engine.grammar.errors import GrammarUnsupported
from engine.grammar.strings import FORMATS, MAX_STRING_CHARS
from tests.engine.grammar.grammar_sampling import accepts, sample_texts

CHECKER = Draft202012Validator.FORMAT_CHECKER


def outputs(schema, count: int = 30, seed: int = 5) -> list:
    grammar = compile_spec(schema_spec(schema))
    validator = Draft202012Validator(schema, format_checker=CHECKER)
    values = [json.loads(t) for t in sample_texts(grammar, count, seed=seed)]
    for v in values:
        errors = list(validator.iter_errors(v))
        assert not errors, (v, errors[0].message)
    return values


def strict_hostname(name: str) -> bool:
    labels = name.split(".")
    return len(name) <= 253 and all(0 < len(lb) <= 63 and not lb.startswith("-") and not lb.endswith("-")
                                    for lb in labels) and not labels[-1].isdigit() and bool(idna.encode(name))


def strict_uri(uri: str) -> bool:
    parts = urllib.parse.urlsplit(uri)
    return parts.scheme in ("http", "https") and strict_hostname(parts.hostname or "") \
        and uri == urllib.parse.quote(uri, safe=":/?&=.~_-")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_writes_values_its_checker_accepts(fmt):
    values = outputs({"type": "string", "format": fmt})
    assert len(set(values)) > 20
    if fmt == "hostname":
        assert all(strict_hostname(v) for v in values)
    if fmt in ("uri", "url"):
        assert all(strict_uri(v) for v in values), values


def test_a_format_whose_pattern_leaves_no_string_is_refused_naming_the_pattern():
    with pytest.raises(GrammarUnsupported) as err:
        compile_spec(schema_spec({"type": "string", "format": "uuid", "pattern": "^[0-9]+$"}))
    assert err.value.keyword == "pattern" and err.value.path == "$.pattern"


def test_lengths_with_a_format_or_pattern_hold_by_construction_or_are_refused():
    http_url = {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083}      # pydantic HttpUrl
    assert all(strict_uri(v) for v in outputs(http_url))
    assert all(2 <= len(v) <= 5 for v in outputs({"type": "string", "pattern": "^[a-z]{2,5}$", "maxLength": 5}))
    for schema in ({"type": "string", "format": "uri", "maxLength": 10},
                   {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                   {"type": "string", "pattern": "^[a-z]{2,5}$", "minLength": 3}):
        with pytest.raises(GrammarUnsupported):
            compile_spec(schema_spec(schema))


def test_long_plain_strings_are_served_up_to_the_cap():
    grammar = compile_spec(schema_spec({"type": "string", "minLength": 3, "maxLength": 100_000}))
    assert accepts(grammar, json.dumps("x" * MAX_STRING_CHARS)) and not accepts(grammar, '"ab"')
    with pytest.raises(GrammarUnsupported) as err:
        compile_spec(schema_spec({"type": "string", "minLength": MAX_STRING_CHARS + 1}))
    assert err.value.keyword == "minLength"


def test_property_names_with_a_pattern_or_an_enum_limit_the_extra_keys():
    record = {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,8}$"},
              "additionalProperties": {"type": "integer"}}
    values = outputs(record, count=40)
    assert any(values) and all(regex.fullmatch("[a-z]{1,8}", k) for v in values for k in v)
    keyed = {"type": "object", "properties": {"cpu": {"type": "integer"}},
             "propertyNames": {"enum": ["cpu", "mem", "disk"]}, "additionalProperties": {"type": "integer"}}
    values = outputs(keyed, count=40)
    assert {k for v in values for k in v} == {"cpu", "mem", "disk"}
    grammar = compile_spec(schema_spec(keyed))
    assert accepts(grammar, '{"mem": 1}') and not accepts(grammar, '{"gpu": 1}')
    with pytest.raises(GrammarUnsupported):
        compile_spec(schema_spec({**record, "properties": {"Id": {"type": "string"}}}))
