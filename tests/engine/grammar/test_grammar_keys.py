"""A key is written once per object wherever the keys are open (engine/grammar/keys.py):
`json_object` mode, the members `additionalProperties` admits, `{"type": "object"}`, and
tool-call arguments; the same text with the key not repeated is still allowed, the mask and
the forced drafts agree with `allows`, and objects of declared keys are as they were."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.grammar.compile import CallSyntax, GrammarSpec, schema_spec
from engine.grammar.keys import KeyCursor, KeyRule
from engine.grammar.thinking import ThinkPrefix
from tests.engine.grammar.tiny_tokens import TinyTokenizer, at, runtime_for

OPEN_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}},
               "additionalProperties": {"type": "string"}}
HERMES_CALLS = CallSyntax(begin="<tool_call>", end="</tool_call>")


def calls_spec(params: dict, auto: bool = False) -> GrammarSpec:
    return GrammarSpec("tool_calls", tools=(("f", json.dumps(params)),), call_syntax=HERMES_CALLS,
                       auto=auto)


def token_of(tok: TinyTokenizer, text: str) -> int:
    return tok.vocab.index(text.encode())


@pytest.mark.parametrize("spec, before", [
    (GrammarSpec("json_object"), '{"role": "user", '),
    (GrammarSpec("json_object"), '{"a": {"role": 1}, "b": [{"x": 1, '.replace('"x"', '"role"')),
    (schema_spec({"type": "object"}), '{"role": "user",\n  '),
    (schema_spec(OPEN_SCHEMA), '{"name": "n", "role": "user", '),
    (calls_spec({"type": "object"}), '<tool_call>{"name": "f", "arguments": {"role": "user", '),
    (calls_spec({"type": "object"}, auto=True), '<tool_call>{"name": "f", "arguments": {"role": 1, '),
])
def test_a_repeated_key_is_refused_where_keys_are_open(spec, before):
    tok = TinyTokenizer(pieces=('"role"', '"roles"', '"', 'role', 'le"'))
    runtime = runtime_for(spec, tok)
    c = at(runtime, before)
    repeat, other = token_of(tok, '"role"'), token_of(tok, '"roles"')
    assert not c.allows(repeat) and c.allows(other)
    mask = c.mask()
    assert not mask[repeat] and mask[other]
    assert mask[token_of(tok, '"')]                       # a key may still start
    # written piece by piece, the repeat is refused at its closing quote
    inside = at(runtime, before + '"ro')
    assert not inside.allows(token_of(tok, 'le"')) and inside.allows(ord("l"))
    closing = at(runtime, before + '"role')
    assert not closing.allows(ord('"')) and not closing.mask()[ord('"')]
    assert closing.allows(ord("s"))


def test_every_key_of_an_object_counts_and_each_object_has_its_own():
    tok = TinyTokenizer(pieces=('"a"', '"b"'))
    runtime = runtime_for(GrammarSpec("json_object"), tok)
    a, b = token_of(tok, '"a"'), token_of(tok, '"b"')
    c = at(runtime, '{"a": 1, "b": {"a": 2, ')
    assert not c.allows(a) and c.allows(b)               # the inner object has "a" only
    c = at(runtime, '{"a": 1, "b": {"a": 2}, ')
    assert not c.allows(a) and not c.allows(b)           # the outer one has both
    c = at(runtime, '{"l": [{"a": 1}, {')
    assert c.allows(a)                                   # a new object starts empty
    c = at(runtime, '{"s": "\\"a\\", ", ')               # a value's quotes are not keys
    assert c.allows(a)


def test_declared_keys_and_free_text_are_as_before():
    tok = TinyTokenizer(pieces=('"a"',))
    a = token_of(tok, '"a"')
    declared = runtime_for(schema_spec({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}}), tok)
    assert at(declared, '{').allows(a)
    # under `auto`, an answer that is not calls is free text: braces in it check nothing
    free = runtime_for(calls_spec({"type": "object"}, auto=True), tok)
    assert at(free, 'I would write {"a": 1, ').allows(a)
    # the reasoning before a JSON answer is not JSON
    think = ThinkPrefix("<think>", "</think>")
    thinking = runtime_for(GrammarSpec("json_object", think=think), tok)
    assert at(thinking, '<think>{"a": 1, ').allows(a)
    assert not at(thinking, '<think>{"a": 1, </think>\n\n{"a": 1, ').allows(a)
    assert not at(thinking, '{"a": 1, ').allows(a)        # no reasoning: JSON from the start


def test_the_mask_is_the_automatons_less_exactly_the_repeats():
    tok = TinyTokenizer(pieces=('"a"', '"b"', '"a":', ' "a"', ' "b"', '"a", "'))
    runtime = runtime_for(GrammarSpec("json_object"), tok)
    repeats = [token_of(tok, piece) for piece in ('"a"', '"a":', ' "a"', '"a", "')]
    for before in ('{"a": 1,', '{"a": 1, '):
        c = at(runtime, before)
        base = runtime.mask(c.state)
        assert base[repeats].any()                       # the automaton alone allows a repeat
        expected = base.copy()
        expected[repeats] = False
        assert np.array_equal(c.mask(), expected), before
        assert [t for t in range(len(tok.vocab) - 1) if c.mask()[t] != c.allows(t)] == []


def test_forced_drafts_stop_before_a_forced_repeat():
    """`propertyNames` with one name forces the extra key after a comma: there it is a
    repeat, so the drafts stop where the grammar alone would have forced it."""
    schema = {"type": "object", "propertyNames": {"enum": ["only"]},
              "additionalProperties": {"type": "integer"}}
    tok = TinyTokenizer(pieces=('"only"', ': ', ', '))
    runtime = runtime_for(schema_spec(schema), tok)
    again = at(runtime, '{"only": 1, ')
    alone = runtime.forced.drafts(again.state, again.view, 8)
    assert tok.decode(alone).startswith('"only"')        # what the automaton would draft
    assert not again.allows(token_of(tok, '"only"'))
    assert again.forced_drafts(8) == []


def test_the_cursor_reads_markup_around_calls_and_starts_at_the_trigger():
    cursor = KeyCursor(KeyRule(trigger=b"[TOOL_CALLS]"))
    cursor.feed(b'[TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}, {"name": "f", "arguments": {')
    assert not cursor.repeats(b'"x"')                    # each call's arguments are their own
    cursor.feed(b'"x": 1, ')
    assert cursor.repeats(b'"x"') and cursor.watching
    free = KeyCursor(KeyRule(trigger=b"[TOOL_CALLS]"))
    free.feed(b'[TOOLS] {"x": 1, ')
    assert not free.repeats(b'"x"') and not free.watching
