"""The JSON layout a model's text follows (engine/grammar/layout.py): learned from the text
written so far, it says the whitespace forced drafts write where JSON leaves it optional."""
from __future__ import annotations

import json

from engine.grammar.jsontext import MAX_INDENT_CHARS
from engine.grammar.layout import (COLON, COMMA, MAX_RUN_CHARS, OPEN, OTHER, QUOTE, START, TextView,
                                  feed, plan)

DOC = {"a": 1, "b": {"c": [True, "x"]}, "d": "e"}


def view_of(text: str) -> TextView:
    return feed(TextView(), text.encode())


def test_compact_text_keeps_json_dumps_separators():
    assert plan(view_of(""), "{") == ""
    assert plan(view_of('{"a":'), None) == " "
    assert plan(view_of('{"a": 1,'), '"') == " "
    assert plan(view_of('{"a": {'), '"') == ""
    assert plan(view_of('{"a": {"b": 1'), "}") == ""
    assert not view_of(json.dumps(DOC)).multiline


def test_one_member_per_line_is_learned_with_its_indent_step():
    text = json.dumps(DOC, indent=3)
    view = view_of(text[:text.index('"c"')])                 # '{\n   "a": 1,\n   "b": {\n      '
    assert view.multiline and view.unit == 3 and view.last_kind == OPEN and view.run == "\n      "
    assert plan(view, '"') == "\n      "                      # the run already holds it all
    inside = view_of(text[:text.index('"c"') + 4])            # ... "c":
    assert inside.line_indent == 6 and inside.last_kind == COLON
    assert plan(view_of(text[:text.index("true") + 4] + ","), None) == "\n" + " " * 9
    assert plan(view_of(text[:text.index('"x"') + 3]), "]") == "\n" + " " * 6
    assert plan(view_of(text[:text.index("]") + 1]), "}") == "\n   "
    assert plan(view_of('{\n  "a": ['), "]") == ""            # an empty array stays shut
    assert plan(view_of('{\n  "a": 1'), None) == ""           # `,` or `}`: the model's choice


def test_the_view_tracks_the_last_non_space_byte_and_the_run_after_it():
    assert view_of("") == TextView(START, "", False, 0, 0)
    assert view_of('{"a"').last_kind == QUOTE and view_of('{"a": 12').last_kind == OTHER
    assert view_of('{"a",  ').last_kind == COMMA and view_of('{"a",  ').run == "  "
    view = view_of('{"a": 1, "b": "x')
    assert view.run == "" and view.last_kind == OTHER
    assert MAX_RUN_CHARS == 1 + MAX_INDENT_CHARS              # the grammar's longest gap
    assert view_of("x" * 40 + " " * 40).run == " " * MAX_RUN_CHARS        # bounded
    assert feed(view, b'yz') is view                             # nothing to learn: no new tuple


def test_the_spaces_after_a_key_and_a_comma_are_the_texts_own():
    tight = view_of('{"a":1,"b":{"c":')
    assert plan(tight, None) == "" and plan(view_of('{"a":1,"b":2,'), '"') == ""
    assert plan(view_of('{"a":  1,  "b":'), None) == "  "
    assert plan(view_of('{"t": "10:30", "b":'), None) == " "    # a colon inside a string teaches nothing
    assert view_of('{"t": "10:30"').after_colon == " "


def test_whitespace_before_a_comma_is_the_texts_own():
    """smol-135m, greedy, may put its commas on lines of their own (`"x"\\n,\\n"y"`): the
    drafts after a value then start with that newline (bench/grammar_accept.py: a quarter
    of the grammar drafts' rejections on the extraction task were this)."""
    own_lines = view_of('{\n"a": "x"\n,\n"b": "y"')
    assert own_lines.before_comma == "\n"
    assert plan(own_lines, ",") == "\n"
    assert plan(view_of('{\n"a": "x"\n\n,\n"b": 2'), ",") == "\n\n"
    assert plan(view_of('{"a": 1 , "b": 2'), ",") == " "
    assert plan(view_of('{"a": 1, "b": 2'), ",") == ""          # json.dumps: none
    assert plan(own_lines, "}") == "\n"                           # a closer keeps its own rule


def test_the_first_indent_is_guessed_as_json_dumps_indent_2():
    """After `{` and a newline the first member's indent is not yet known: 2 spaces, as
    json.dumps(indent=2) and smol-135m write it, rather than none."""
    assert plan(view_of("{\n"), '"') == "\n  "
    assert plan(view_of('{\n  "a": {\n'), '"') == "\n    "
    assert plan(view_of('{\n    "a": {\n'), '"') == "\n        "      # a step once shown is kept
