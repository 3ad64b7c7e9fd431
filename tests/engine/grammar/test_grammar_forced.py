"""Grammar-forced drafts (engine/grammar/forced.py, `Constraint.forced_drafts`): the text a
schema forces from a state (keys in order, an enum after a unique prefix, a const, closing
brackets; nothing inside a free string), turned into tokens the automaton allows in
sequence, never EOS, at most `max_tokens`, cached per state; with a tiny longest-match
tokenizer and with smol-135m's own."""
from __future__ import annotations

import json
import random

import pytest

from engine.grammar.compile import CallSyntax, GrammarCache, GrammarSpec, schema_spec
from engine.grammar.constraint import Constraint, Guides
from engine.grammar.forced import expected_text, spelled_tokens
from engine.grammar.layout import TextView, feed
from engine.grammar.vocab import build_table
from tests.engine.grammar.grammar_sampling import sample_texts
from tests.engine.grammar.schemas import WEATHER_SCHEMA
from tests.engine.grammar.tiny_tokens import PIECES, TinyTokenizer, at, runtime_for


def forced_after(spec: GrammarSpec, text: str) -> str:
    m = runtime_for(spec, TinyTokenizer()).matcher
    state = m.step_bytes(m.initial, text.encode())
    return expected_text(m, state, feed(TextView(), text.encode()))


@pytest.mark.parametrize("before, forced", [
    ("", '{"name": "'),                          # the first key, in order, up to the free value
    ('{"name": "Bo', ""),                        # inside a string: the model writes
    ('{"name": "Bob"', ', "unit": "'),           # the next required key (no space before `,`)
    ('{"name": "Bob",', ' "unit": "'),           # ... a space after it, as json.dumps writes
    ('{"name": "Bob",\n', '"unit": "'),         # ... none when the model wrote its own
    ('{"name": "Bob", "unit": "c', 'elsius", "k": "abc", "o": {"x": '),   # enum prefix, const
    ('{"name": "Bob", "unit": "f', 'ahrenheit", "k": "abc", "o": {"x": '),
    ('{"name": "B", "unit": "celsius", "k": "abc", "o": {"x": 12', ""),   # a number may go on
    ('{"name": "B", "unit": "celsius", "k": "abc", "o": {"x": 12 ', "}}"),  # closing brackets
    ('{"name": "Bob",\n\t', '"unit": "'),       # the model's own whitespace: none added
    ('{\n  "name": "Bob",', '\n  "unit": "'),   # one member per line, as the text began
    ('{\n  "name": "Bob",\n  "unit": "c', 'elsius",\n  "k": "abc",\n  "o": {\n    "x": '),
    ('{\n  "name": "B",\n  "unit": "celsius",\n  "k": "abc",\n  "o": {\n    "x": 12\n', "  }\n}"),
    ('{\n"name": "Bob"\n,\n"unit": "celsius"', '\n,\n"k": "abc"\n,\n"o": {\n  "x": '),   # commas on own lines
])
def test_the_forced_text_of_a_schema(before, forced):
    assert forced_after(schema_spec(WEATHER_SCHEMA), before) == forced


def test_forced_text_stops_where_the_grammar_accepts_or_chooses():
    assert forced_after(GrammarSpec("regex", "abc(d|e)"), "") == "abc"
    assert forced_after(GrammarSpec("regex", "ab(c)?"), "") == "ab"          # "ab" may end
    assert forced_after(GrammarSpec("regex", "ab(c)?"), "ab") == ""
    assert forced_after(GrammarSpec("text"), "") == ""
    assert forced_after(GrammarSpec("choice", json.dumps(["yes", "yet", "no"])), "ye") == ""
    assert forced_after(GrammarSpec("choice", json.dumps(["yes", "no"])), "y") == "es"


def test_drafts_are_the_tokenizers_encoding_and_stop_before_a_token_that_merges():
    tok = TinyTokenizer()
    runtime = runtime_for(schema_spec(WEATHER_SCHEMA), tok)
    c = at(runtime, '{"name": "Bob", "unit": "c')
    drafts = c.forced_drafts(32)
    assert drafts == tok.encode('elsius", "k": "abc", "o": {"x": ')     # no token joins " " and a digit
    # At the enum's end the closing quote is followed by `,` or `}`: with `",` and `"}` in
    # the vocabulary the model writes those, so a lone `"` is not drafted.
    spec = schema_spec({"type": "object", "properties": {"unit": {"enum": ["celsius", "x"]},
                                                         "b": {"type": "integer"}}, "required": ["unit"]})
    assert tok.decode(at(runtime_for(spec, tok), '{"unit": "c').forced_drafts(8)) == "elsius"
    plain = TinyTokenizer([p for p in PIECES if p not in ('",', '"}')])
    assert plain.decode(at(runtime_for(spec, plain), '{"unit": "c').forced_drafts(8)) == 'elsius"'


def test_drafts_spell_the_forced_text_as_a_model_wrote_it_before():
    """A model need not write forced text in the tokenizer's tokens (smol-135m, greedy,
    wrote `"p|ri|or|ity"`): once one sequence has written from a state, later drafts from
    that state take its token, and the tokenizer's spelling of the rest after it."""
    tok = TinyTokenizer()
    runtime = runtime_for(schema_spec(WEATHER_SCHEMA), tok)
    before = '{"name": "Bob"'
    assert at(runtime, before).forced_drafts(8)[:3] == tok.encode(', "unit')
    at(runtime, before + ', "un')                           # a sequence writes it byte by byte
    learned = at(runtime, before).forced_drafts(8)
    assert learned[:5] == list(b', "un')                    # byte ids: the bytes it wrote
    assert learned[5:] == tok.encode('it": "')[:3]          # then the tokenizer's spelling again


def test_a_learned_token_off_the_forced_text_is_not_drafted():
    """What a model wrote where the layout now puts other whitespace (here a newline before
    `,` in compact text) is no draft: the forced text as the tokenizer spells it is."""
    tok = TinyTokenizer()
    runtime = runtime_for(schema_spec(WEATHER_SCHEMA), tok)
    at(runtime, '{"name": "Bob"\n')
    assert at(runtime, '{"name": "Bob"').forced_drafts(8) == tok.encode(', "unit": "')[:5]


def test_no_drafts_inside_free_text_and_none_after_the_end():
    tok = TinyTokenizer()
    runtime = runtime_for(schema_spec(WEATHER_SCHEMA), tok)
    assert at(runtime, '{"name": "Bo').forced_drafts(8) == []
    c = at(runtime, '{"name": "B", "unit": "celsius", "k": "abc", "o": {"x": 1}}')
    assert c.forced_drafts(8) == []                          # complete: EOS is the model's to write
    c.advance(tok.eos)
    assert c.finished and c.forced_drafts(8) == []


def test_drafts_are_bounded_by_max_tokens_and_cached_per_state():
    tok = TinyTokenizer()
    runtime = runtime_for(schema_spec(WEATHER_SCHEMA), tok)
    rows = [at(runtime, '{"name": "Bob", "unit": "c') for _ in range(4)]
    full = rows[0].forced_drafts(32)
    assert len(full) > 8 and runtime.forced.built == 1
    for k in range(10):
        assert rows[k % 4].forced_drafts(k) == full[:k]
    assert runtime.forced.built == 1                          # one build served every row and size
    state = rows[1].state
    assert rows[1].forced_drafts(5) == full[:5] and rows[1].state == state   # the cursor stays put
    rows[2].advance(full[0])
    assert rows[2].forced_drafts(32) == full[1:] and runtime.forced.built == 2


def test_a_tokenizer_that_prefixes_a_space_still_drafts_the_text_itself():
    tok = TinyTokenizer(space_prefix=True)
    table = build_table(tok.vocab, special_ids=set(), eos_ids={tok.eos})
    assert tok.decode(tok.encode("abc")) == " abc"
    assert tok.decode(spelled_tokens(tok.encode, table, 'abc", ')) == 'abc", '


def test_drafts_parse_in_sequence_and_never_hold_eos_on_random_sentences():
    """Property: from every state along random sentences of several grammars, each draft is
    allowed after the ones before it, none is EOS, and they spell the forced text's start."""
    tok = TinyTokenizer()
    rng = random.Random(5)
    specs = [schema_spec(WEATHER_SCHEMA), GrammarSpec("json_object"),
             GrammarSpec("regex", r"(cat|dog)s?-\d{1,2}"),
             GrammarSpec("tool_calls", tools=(("get_weather", json.dumps(WEATHER_SCHEMA)),),
                         call_syntax=CallSyntax(begin="<tool_call>", end="</tool_call>"))]
    drafted = 0
    for spec in specs:
        runtime = runtime_for(spec, tok)
        for text in sample_texts(runtime.grammar, 4, seed=rng.randrange(1000)):
            c = Constraint(runtime)
            for b in text.encode():
                drafts = c.forced_drafts(6)
                assert len(drafts) <= 6 and tok.eos not in drafts
                forced = expected_text(runtime.matcher, c.state, c.view)
                assert forced.encode().startswith(b"".join(tok.vocab[t] for t in drafts))
                probe = Constraint(runtime)
                probe.state = c.state
                for t in drafts:
                    assert probe.allows(t)
                    probe.advance(t)
                drafted += len(drafts)
                c.advance(b)
    assert drafted > 100


@pytest.mark.real_model
def test_smol_drafts_a_tool_calls_fixed_text_and_parse_to_the_answer(real_model):
    """smol-135m's tokenizer: the start of a Hermes call is drafted up to the tool's name,
    and an answer written by taking every draft plus one chosen token where there is none
    (the end-to-end check: drafts fed through `advance`) is the JSON the schema asks for."""
    tok = real_model.tokenizer
    guides = Guides(tok, real_model.config.vocab_size, tok.eos_token_ids)
    weather = json.dumps(WEATHER_SCHEMA)
    spec = GrammarSpec("tool_calls", tools=(("get_weather", weather), ("get_time", weather)),
                       call_syntax=CallSyntax(begin="<tool_call>", end="</tool_call>"))
    c = guides.constraint(GrammarCache().get(spec))
    start = tok.decode(c.forced_drafts(32))
    assert '<tool_call>{"name": "get_'.startswith(start) and len(start) >= len('<tool_call>{"name":')
    answer = '<tool_call>{"name": "get_time", "arguments": {"name": "Oslo", "unit": "fahrenheit", ' \
             '"k": "abc", "o": {"x": 7}}}</tool_call>'
    ids, pos, accepted = tok.encode(answer), 0, 0
    while pos < len(ids):
        drafts = c.forced_drafts(8)
        assert not set(drafts) & set(tok.eos_token_ids)
        n = 0
        while n < len(drafts) and pos + n < len(ids) and drafts[n] == ids[pos + n]:
            n += 1
        for token in ids[pos:pos + n + 1]:
            assert c.allows(token)
            c.advance(token)
        pos, accepted = pos + n + 1, accepted + n
    assert c.complete and tok.decode(ids) == answer
    assert accepted >= len(ids) // 2          # most of a call's tokens are the grammar's


@pytest.mark.real_model
def test_smol_drafts_build_a_valid_document_on_their_own(real_model):
    """Only drafts, plus a fixed token where the model would choose: the text parses and
    follows the schema (every draft advanced through the constraint)."""
    tok = real_model.tokenizer
    guides = Guides(tok, real_model.config.vocab_size, tok.eos_token_ids)
    c = guides.constraint(GrammarCache().get(schema_spec(WEATHER_SCHEMA)))
    free = iter('x"c7}')                 # the model's characters where the grammar leaves a choice
    out: list[int] = []
    drafted = 0
    while not c.complete:
        # no draft: the next forced character (a token dropped as one that may merge) or a free one
        forced = expected_text(c.runtime.matcher, c.state, c.view)
        drafts = c.forced_drafts(8)
        step = drafts or tok.encode(forced[:1] or next(free))
        drafted += len(drafts)
        for token in step:
            assert c.allows(token) and token not in tok.eos_token_ids
            c.advance(token)
        out += step
    doc = json.loads(tok.decode(out))
    assert doc == {"name": "x", "unit": "celsius", "k": "abc", "o": {"x": 7}}
    assert drafted >= 0.75 * len(out)         # all but the free characters (and a few merges)


class CountingTokenizer(TinyTokenizer):
    """TinyTokenizer noting every text it is asked to encode."""

    def __init__(self):
        super().__init__()
        self.encoded: list[str] = []

    def encode(self, text: str) -> list[int]:
        self.encoded.append(text)
        return super().encode(text)


def test_a_state_seen_before_is_a_lookup():
    """The policy asks every constrained row every step: asked again before it moves, a
    cursor answers from its memo; a new cursor in a state seen before (one with drafts, one
    inside free text, the start) from the runtime's cache. Neither builds or calls the
    tokenizer (bench/grammar_times.py times the call)."""
    tok = CountingTokenizer()
    runtime = runtime_for(schema_spec(WEATHER_SCHEMA), tok)
    texts = ("", '{"name": "Bob",', '{"name": "Bob", "unit": "c', '{"name": "Bo')
    rows = [at(runtime, text) for text in texts]
    first = [row.forced_drafts(8) for row in rows]                # built here
    built, encoded = runtime.forced.built, len(tok.encoded)
    assert built >= len(rows) and encoded > 0 and all(first[:3]) and first[3] == []
    for _ in range(50):
        fresh = [at(runtime, text) for text in texts]             # no memo: the runtime's cache
        for row, drafts in zip(rows + fresh, first + first):
            assert row.forced_drafts(8) == drafts
    assert runtime.forced.built == built and len(tok.encoded) == encoded
