"""The grammar room: charsets, the regex subset, JSON Schema -> automaton, the token mask."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.grammar import charset
from engine.grammar.automaton import DEAD, Matcher
from engine.grammar.compile import GrammarCache, GrammarSpec, CallSyntax, schema_spec
from engine.grammar.jsontext import MAX_INDENT_CHARS
from engine.grammar.errors import GrammarInvalid, GrammarUnsupported
from engine.grammar.vocab import allowed_tokens, build_table


def accepts(spec: GrammarSpec, text: str) -> bool:
    m = Matcher(GrammarCache().get(spec))
    state = m.step_bytes(m.initial, text.encode("utf-8"))
    return state != DEAD and m.accepts(state)


def schema_accepts(schema, text: str) -> bool:
    return accepts(schema_spec(schema), text)


def test_utf8_prefix_ranges_are_exact():
    assert charset.utf8_prefix_range(b"\xe3") == (0x3000, 0x3FFF)
    assert charset.utf8_prefix_range(b"\xe0\x80") is None            # overlong
    assert charset.utf8_prefix_range(b"\xed\xa0") is None            # surrogates
    assert charset.utf8_prefix_range(b"\xc0") is None


def test_charset_algebra():
    abc = charset.chars("abc")
    assert charset.contains(abc, ord("b")) and not charset.contains(abc, ord("d"))
    assert charset.minus(abc, charset.chars("b")) == ((97, 97), (99, 99))
    assert not charset.contains(charset.ANY, 0xD800)


@pytest.mark.parametrize("schema,good,bad", [
    ({"type": "integer", "minimum": -20, "exclusiveMaximum": 7}, ["-20", "0", "6"], ["7", "-21", "-0", "01"]),
    ({"type": "integer", "minimum": 95, "maximum": 1234}, ["95", "999", "1234"], ["94", "1235", "10000"]),
    ({"type": "string", "minLength": 2, "maxLength": 3}, ['"ab"', '"a\\n"', '"ééé"'], ['"a"', '"abcd"']),
    ({"type": "string", "format": "date"}, ['"2024-02-28"', '"1999-12-31"'], ['"2024-02-30"', '"2024-13-01"']),
    ({"type": "string", "format": "uuid"}, ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123"']),
    ({"type": "string", "pattern": "^[a-c]+-\\d{2}$"}, ['"ab-12"'], ['"ab-1"', '"xab-12"']),
    ({"type": "string", "pattern": "ok"}, ['"xokx"', '"ok"'], ['"o"']),
    ({"enum": ["red", 3, None]}, ['"red"', "3", "null"], ['"blue"']),
    ({"type": ["string", "null"]}, ['"x"', "null"], ["1"]),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3},
     ["[1, 2]", "[1,2,3]"], ["[1]", "[1,2,3,4]", "[]"]),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
     ['[1, "a"]', "[1]", "[]"], ['[1, "a", 2]', '["a"]']),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}, "required": ["b"]},
     ['{"b": true}', '{"a": 1, "b": false}'], ['{"a": 1}', '{"b": true, "a": 1}', '{"b": true, "c": 1}']),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     ['{"a": 1, "ab": "x"}', '{"z": "y"}'], ['{"a": 1, "a": "x"}', '{"z": 1}']),
    ({"type": "integer", "nullable": True}, ["null", "4"], ['"4"']),
])
def test_schema_languages(schema, good, bad):
    for text in good:
        assert schema_accepts(schema, text), text
    for text in bad:
        assert not schema_accepts(schema, text), text


def test_recursive_refs_and_whitespace_bound():
    tree = {"$defs": {"Node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
        "required": ["v"]}}, "$ref": "#/$defs/Node"}
    assert schema_accepts(tree, '{"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4}]}]}')
    assert not schema_accepts(tree, '{"kids": []}')
    # a gap is nothing, one space, or a newline and at most MAX_INDENT_CHARS spaces or tabs
    # (an empty object has two gaps: after "{" and before "}")
    indent = "\n" + " " * MAX_INDENT_CHARS
    assert schema_accepts({"type": "object"}, "{" + indent + indent + "}")
    assert not schema_accepts({"type": "object"}, "{" + indent + " " + indent + "}")
    assert schema_accepts({"type": "array"}, "[1,\n\t\t2]")
    for gap in ("  ", "\t", "\n\n", " \n", "\n" + " " * (MAX_INDENT_CHARS + 1)):
        assert not schema_accepts({"type": "array"}, "[1," + gap + "2]"), repr(gap)


def _nested(depth: int):
    return {"k": _nested(depth - 1)} if depth else 1


def test_json_dumps_layouts_are_accepted_to_depth_sixteen():
    """Compact, json.dumps' default and `indent=2` all fit; one level deeper than the indent
    bound does not (`json.dumps(indent=2)` past depth 3 needs a newline and 8 spaces)."""
    for depth in (1, 4, 16):
        doc = _nested(depth)
        for text in (json.dumps(doc), json.dumps(doc, separators=(",", ":")),
                     json.dumps(doc, indent=2), json.dumps(doc, indent="\t")):
            assert schema_accepts({"type": "object"}, text), (depth, text)
    assert MAX_INDENT_CHARS == 2 * 16
    assert not schema_accepts({"type": "object"}, json.dumps(_nested(17), indent=2))


def test_unsupported_and_invalid_schemas_name_keyword_and_path():
    with pytest.raises(GrammarUnsupported) as err:
        GrammarCache().get(schema_spec({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.5}}}))
    assert err.value.keyword == "multipleOf" and err.value.path == "$.properties.n.multipleOf"
    with pytest.raises(GrammarUnsupported):
        GrammarCache().get(schema_spec({"type": "string", "format": "idn-email"}))
    with pytest.raises(GrammarInvalid) as bad:
        GrammarCache().get(schema_spec({"type": "strnig"}))
    assert bad.value.path == "$.type"
    with pytest.raises(GrammarInvalid):
        GrammarCache().get(schema_spec({"$ref": "#/$defs/Missing"}))
    with pytest.raises(GrammarUnsupported):
        GrammarCache().get(GrammarSpec("regex", r"(?<=a)b"))


def test_regex_choice_and_text_grammars():
    assert accepts(GrammarSpec("regex", r"(cat|dog)s?\d{1,2}"), "dogs12")
    assert not accepts(GrammarSpec("regex", r"(cat|dog)s?\d{1,2}"), "dogs123")
    assert accepts(GrammarSpec("choice", json.dumps(["yes", "no"])), "no")
    assert not accepts(GrammarSpec("choice", json.dumps(["yes", "no"])), "nope")
    assert accepts(GrammarSpec("text"), "anything at all ✓")


def test_tool_call_grammar_required_and_auto():
    hermes = CallSyntax(begin="<tool_call>", end="</tool_call>")
    tools = (("get_weather", json.dumps({"type": "object", "properties": {"city": {"type": "string"}},
                                         "required": ["city"]})),)
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    required = GrammarSpec("tool_calls", tools=tools, call_syntax=hermes)
    assert accepts(required, call) and accepts(required, call + "\n" + call)
    assert not accepts(required, "hello")
    assert not accepts(required, call.replace("get_weather", "other"))
    single = GrammarSpec("tool_calls", tools=tools, call_syntax=hermes, parallel=False)
    assert not accepts(single, call + call)
    auto = GrammarSpec("tool_calls", tools=tools, call_syntax=hermes, auto=True)
    assert accepts(auto, "plain text") and accepts(auto, call) and accepts(auto, "<b>")
    assert not accepts(auto, "<tool_call>{\"name\": \"nope\"")


def test_grammar_cache_compiles_once_per_canonical_text():
    cache = GrammarCache()
    a = cache.get(schema_spec({"type": "object", "properties": {"x": {"type": "integer"}}}))
    b = cache.get(schema_spec(json.loads('{"type":"object","properties":{"x":{"type":"integer"}}}')))
    assert a is b and cache.compiles == 1


def test_token_mask_matches_brute_force():
    vocab = [b"{", b"}", b'{"', b'"a', b"a", b'":', b" ", b"1", b"12", b"x", b"\xc3", b"\xa9", b"\xc3\xa9", b"", None]
    eos = 15
    table = build_table(vocab + [b"<eos>"], special_ids=set(), eos_ids={eos})
    m = Matcher(GrammarCache().get(schema_spec({"type": "object", "properties": {"a": {"type": "string"}}})))
    for prefix in [b"", b"{", b'{"a": "', b'{"a": "\xc3', b'{"a": "x"']:
        state = m.step_bytes(m.initial, prefix)
        mask = allowed_tokens(table, m, state)
        expected = [bool(v) and m.step_bytes(state, v) != DEAD for v in vocab] + [m.accepts(state)]
        assert mask.tolist() == expected, prefix
    done = m.step_bytes(m.initial, b'{"a": "x"}')
    assert np.flatnonzero(allowed_tokens(table, m, done)).tolist() == [eos]
