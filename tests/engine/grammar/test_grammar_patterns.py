"""A string format beside any pattern, and look-aheads and word boundaries in a pattern: the
grammar is the exact intersection of the two languages. Checked against Python's `regex`
(fullmatch for the format, search for the pattern, as JSON Schema reads it) on sampled
outputs, on the format's own strings (each accepted exactly when the pattern matches it),
and on every short text over a small alphabet; what the subset cannot read is a 422 that
names the construct."""
from __future__ import annotations

import itertools
import json

import pytest
import regex
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field

from engine.grammar.compile import GrammarSpec, compile_spec, schema_spec
from engine.grammar.errors import GrammarInvalid, GrammarUnsupported
from engine.grammar.strings import FORMATS
from tests.engine.grammar.grammar_sampling import accepts, sample_texts

# Zod 3 (src/types.ts) as a JSON Schema generator writes it: the source of the regex, the
# email's `i` flag spelled out as [A-Za-z].
ZOD3_EMAIL = r"^(?!\.)(?!.*\.\.)([A-Za-z0-9_'+\-\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}$"
ZOD3_UUID = r"^[0-9a-fA-F]{8}\b-[0-9a-fA-F]{4}\b-[0-9a-fA-F]{4}\b-[0-9a-fA-F]{4}\b-[0-9a-fA-F]{12}$"
_ZOD3_DATE = (r"((\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29|\d{4}-"
              r"((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|(02)-(0[1-9]|1\d|2[0-8])))")
ZOD3_DATE = "^" + _ZOD3_DATE + "$"
ZOD3_DATETIME = "^" + _ZOD3_DATE + r"T([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d+)?)?(Z)$"            # .datetime()
ZOD3_DATETIME_MS = "^" + _ZOD3_DATE + r"T([01]\d|2[0-3]):[0-5]\d(:[0-5]\d\.\d{3})+(Z)$"    # precision: 3
# Zod 4 (z.uuid(), z.email(), z.iso.date(), z.iso.datetime(), z.ipv4(), z.ipv6()).
ZOD4_UUID = (r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"
             r"|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$")
ZOD4_EMAIL = (r"^(?:[A-Za-z0-9_'+\-]+\.)*[A-Za-z0-9_'+\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\-]*\.)+"
              r"[A-Za-z]{2,}$")
ZOD4_DATE = (r"^(?:(?:\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29|\d{4}-"
             r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|(?:02)-"
             r"(?:0[1-9]|1\d|2[0-8])))$")
ZOD4_DATETIME = ZOD4_DATE[:-1] + r"T(?:(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?(?:Z))$"
ZOD4_IPV4 = (r"^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\.){3}"
             r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])$")
ZOD4_IPV6 = (r"^(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:"
             r"[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}"
             r"(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}"
             r"(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:((:[0-9a-fA-F]{1,4}){1,6})|:((:[0-9a-fA-F]{1,4}){1,7}|:))$")


class Account(BaseModel):
    """pydantic 2 with a hand-written pattern beside each format (the schema is pydantic's)."""
    email: str = Field(pattern=r"^[\w.+-]+@example\.com$", json_schema_extra={"format": "email"})
    id: str = Field(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
                    json_schema_extra={"format": "uuid"})
    joined: str = Field(pattern=r"^20\d\d-", json_schema_extra={"format": "date"})
    seen: str = Field(pattern=r"\.\d{3}Z$", json_schema_extra={"format": "date-time"})


_PYDANTIC = Account.model_json_schema()["properties"]
# (library, format, pattern, a string of the format that the pattern refuses, or None when
# every string of the served format matches the pattern)
CASES = [
    ("zod3", "email", ZOD3_EMAIL, None),
    ("zod3", "uuid", ZOD3_UUID, None),
    ("zod3", "date", ZOD3_DATE, None),
    ("zod3", "date-time", ZOD3_DATETIME, None),
    ("zod3", "date-time", ZOD3_DATETIME_MS, "2024-01-05T10:00:00Z"),
    ("zod4", "uuid", ZOD4_UUID, None),
    ("zod4", "email", ZOD4_EMAIL, None),
    ("zod4", "date", ZOD4_DATE, None),
    ("zod4", "date-time", ZOD4_DATETIME, None),
    ("zod4", "ipv4", ZOD4_IPV4, None),
    ("zod4", "ipv6", ZOD4_IPV6, None),
    ("pydantic", "email", _PYDANTIC["email"]["pattern"], "ann@example.org"),
    ("pydantic", "uuid", _PYDANTIC["id"]["pattern"], "123e4567-e89b-12d3-a456-426614174000"),
    ("pydantic", "date", _PYDANTIC["joined"]["pattern"], "1999-12-31"),
    ("pydantic", "date-time", _PYDANTIC["seen"]["pattern"], "2024-01-05T10:00:00.12Z"),
    ("hand", "email", r"^(?!admin@)(?=.{1,12}@)", "admin@example.com"),
]
IDS = [f"{lib}-{fmt}-{i}" for i, (lib, fmt, _, _) in enumerate(CASES)]


def both_schema(fmt: str, pattern: str) -> dict:
    return {"type": "string", "format": fmt, "pattern": pattern}


def test_the_pydantic_schema_writes_the_format_beside_the_pattern():
    assert _PYDANTIC["id"]["format"] == "uuid" and _PYDANTIC["seen"]["format"] == "date-time"


@pytest.mark.parametrize("lib,fmt,pattern,refused", CASES, ids=IDS)
def test_every_output_matches_the_format_and_the_pattern(lib, fmt, pattern, refused):
    schema = both_schema(fmt, pattern)
    grammar = compile_spec(schema_spec(schema))
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    values = [json.loads(t) for t in sample_texts(grammar, 60, seed=7)]
    assert len(set(values)) > 40
    for v in values:
        assert regex.fullmatch(FORMATS[fmt], v) and regex.search(pattern, v), v
        assert not list(validator.iter_errors(v)), v


@pytest.mark.parametrize("lib,fmt,pattern,refused", CASES, ids=IDS)
def test_a_string_of_the_format_is_accepted_exactly_when_the_pattern_matches_it(lib, fmt, pattern, refused):
    grammar = compile_spec(schema_spec(both_schema(fmt, pattern)))
    format_only = compile_spec(schema_spec({"type": "string", "format": fmt}))
    texts = sample_texts(format_only, 300, seed=11)
    verdicts = [accepts(grammar, t) for t in texts]
    assert verdicts == [bool(regex.search(pattern, json.loads(t))) for t in texts]
    if refused is None:                                 # the pattern allows every string of the format
        assert all(verdicts)
    else:
        assert regex.fullmatch(FORMATS[fmt], refused) and not regex.search(pattern, refused)
        assert not accepts(grammar, json.dumps(refused))


@pytest.mark.parametrize("pattern,alphabet", [
    (r"^(?!\.)(?!.*\.\.)[a-z.]{1,6}$", "a.b"),        # Zod 3's conditions on an email's start
    (r"^(?=.*\d)[a-z0-9]{2,4}$", "a1-"),               # some digit somewhere
    (r"^(?=.{1,3}@)[a-z]+@[a-z]+$", "a@b"),            # a local part of at most three
    (r"(?!ab)a", "ab"),                                # unanchored: an "a" not followed by "b"
    (r"^a(?=b)", "ab"),                                # a condition after some text
    (r"^a(?!b).$", "abc"),
    (r"\ba\b", "a-"),                                  # a word on its own
    (r"^a\Ba", "a-"),
    (r"^[a-]\ba$", "a-"),                              # "a" first leaves nothing to write: trimmed
    (r"^(?=.{3,5}$)[a-z]+$", "ab"),                     # a look-ahead that reaches the end
    (r"^(?=a$|b)[ab]+$", "ab"),
    (r"^(?!.*\.$)[a.]+$", "a."),                       # an email regex's "no dot last"
    (r"^a(?!-)\b", "ab-"),                             # a \b right after a look-ahead sees the "a"
    (r"^a(?=a|-)\B", "ab-"),
    (r"\b\b\b$", "a-"),
])
def test_look_aheads_and_word_boundaries_alone_are_exact_on_every_short_text(pattern, alphabet):
    grammar = compile_spec(schema_spec({"type": "string", "pattern": pattern}))
    texts = ["".join(t) for n in range(8) for t in itertools.product(alphabet, repeat=n)]
    verdicts = [accepts(grammar, json.dumps(t)) for t in texts]
    assert verdicts == [bool(regex.search(pattern, t)) for t in texts]
    assert any(verdicts)
    for t in sample_texts(grammar, 30, seed=2):                   # and no walk reaches a dead end
        assert regex.search(pattern, json.loads(t))


def test_a_look_ahead_in_a_bare_regex_is_a_full_match():
    grammar = compile_spec(GrammarSpec("regex", r"(?!.*\.\.)[a-z.]{1,5}"))
    texts = ["".join(t) for n in range(7) for t in itertools.product("a.", repeat=n)]
    assert [accepts(grammar, t) for t in texts] == [bool(regex.fullmatch(r"(?!.*\.\.)[a-z.]{1,5}", t))
                                                     for t in texts]


def test_lengths_with_a_format_and_a_pattern_hold_or_are_refused():
    schema = {**both_schema("email", ZOD3_EMAIL), "minLength": 3, "maxLength": 254}
    assert all(3 <= len(json.loads(t)) <= 254 for t in sample_texts(compile_spec(schema_spec(schema)), 30))
    with pytest.raises(GrammarUnsupported) as err:
        compile_spec(schema_spec({**both_schema("uuid", ZOD3_UUID), "maxLength": 10}))
    assert err.value.keyword == "format"


@pytest.mark.parametrize("pattern,names", [
    (r"^(a)\1$", "back-reference"),
    (r"^(?P<x>a)(?P=x)$", "back-reference"),
    (r"^(?<=a)b$", "look-behind"),
    (r"^b(?<!a)$", "look-behind"),
    (r"^(?:(?!a).)*$", "inside a group"),
    (r"^(?=a)*b$", "quantifier on a look-ahead"),
])
def test_what_the_subset_cannot_read_is_a_422_naming_it(pattern, names):
    for schema in ({"type": "string", "pattern": pattern}, both_schema("email", pattern)):
        with pytest.raises(GrammarUnsupported) as err:
            compile_spec(schema_spec(schema))
        assert names in err.value.message and err.value.keyword == "pattern" and err.value.path == "$.pattern"


def test_a_pattern_whose_conditions_leave_nothing_is_refused():
    with pytest.raises(GrammarUnsupported) as err:
        compile_spec(schema_spec({"type": "string", "pattern": r"^(?!a)a$"}))
    assert "nothing to write" in err.value.message and err.value.path == "$.pattern"
    with pytest.raises(GrammarUnsupported) as err:
        compile_spec(GrammarSpec("regex", r"a(?!b)b"))         # after "a" nothing: the whole grammar is empty
    assert "nothing to write" in err.value.message


def test_a_product_too_large_for_the_budget_is_refused():
    """Reading "the 17th character from the end is an a" needs 2**17 DFA states."""
    with pytest.raises(GrammarInvalid) as err:
        compile_spec(schema_spec(both_schema("email", r"a.{16}$")))
    assert "too large to compile" in err.value.message
