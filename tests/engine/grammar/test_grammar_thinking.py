"""engine/grammar/thinking.py: a grammar with a thinking prefix accepts free reasoning between
the tags, then exactly the request's grammar; the answer after `</think>` is constrained
from its first character, and a model that does not think is constrained from the start."""
from __future__ import annotations

import numpy as np
import pytest

from engine.grammar.automaton import DEAD, Matcher
from engine.grammar.compile import GrammarCache, GrammarSpec, schema_spec
from engine.grammar.constraint import Constraint, GrammarRuntime
from engine.grammar.thinking import ThinkPrefix
from engine.grammar.vocab import build_table

SCHEMA = schema_spec({"type": "object", "properties": {"a": {"type": "integer"}},
                      "required": ["a"], "additionalProperties": False})
THINK = ThinkPrefix("<think>", "</think>")
INSIDE = ThinkPrefix("<think>", "</think>", starts_inside=True)


def run(spec: GrammarSpec, text: str) -> tuple[Matcher, int]:
    m = Matcher(GrammarCache().get(spec))
    return m, m.step_bytes(m.initial, text.encode("utf-8"))


def accepts(spec: GrammarSpec, text: str) -> bool:
    m, state = run(spec, text)
    return state != DEAD and m.accepts(state)


def thinking(spec: GrammarSpec, think: ThinkPrefix = THINK) -> GrammarSpec:
    return GrammarSpec(spec.kind, spec.text, spec.tools, spec.call_syntax, spec.parallel,
                       spec.auto, think)


@pytest.mark.parametrize("text", [
    '<think>\nLet me write {"a": 1}. Not </thin k> yet, </thinker> either.\n</think>\n\n{"a": 1}',
    '<think></think>{"a": 2}',
    '\n<think>x</think>\n{"a": 3}',
    '<think><</</th</think{"a":</think>{"a": 4}',       # partial tags inside the reasoning
    '{"a": 5}',                                          # no thinking: the grammar from the start
])
def test_free_reasoning_then_exactly_the_answer(text):
    assert accepts(thinking(SCHEMA), text)


@pytest.mark.parametrize("text", [
    '<think>reasoning</think>\n\nnot json',             # the answer is constrained
    '<think>reasoning</think>{"a": 1} and more',
    '<think>never closed',                               # thinking is not an answer
    'plain {"a": 1}',                                    # no tag: the schema from the first char
    '<think>a</think><think>b</think>{"a": 1}',          # the second tag is answer text
])
def test_the_answer_after_the_tag_is_constrained(text):
    assert not accepts(thinking(SCHEMA), text)


def test_without_the_prefix_the_same_reasoning_is_refused():
    assert not accepts(SCHEMA, '<think>x</think>{"a": 1}')


def test_a_prompt_that_opened_the_tag_needs_its_close():
    assert accepts(thinking(SCHEMA, INSIDE), 'reasoning\n</think>\n\n{"a": 1}')
    assert not accepts(thinking(SCHEMA, INSIDE), '{"a": 1}')           # still reasoning: no end
    m, state = run(thinking(SCHEMA, INSIDE), '{"a": 1}')
    assert state != DEAD                                  # ... but JSON is fine reasoning text


def test_a_regex_answer_and_tool_calls_take_the_prefix_too():
    regex = thinking(GrammarSpec("regex", "yes|no"))
    assert accepts(regex, "<think>maybe</think>\n\nyes")
    assert not accepts(regex, "<think>maybe</think>\n\nmaybe")


def test_the_prefix_is_part_of_the_cache_key():
    cache = GrammarCache()
    assert cache.get(SCHEMA).key != cache.get(thinking(SCHEMA)).key
    assert cache.get(thinking(SCHEMA)).key != cache.get(thinking(SCHEMA, INSIDE)).key


def test_masks_allow_any_reasoning_token_then_only_the_answer():
    """Token by token, as the sampler sees it: the special `</think>` token of Qwen3 is one
    token; inside the reasoning a token the schema forbids is allowed, after the tag not."""
    vocab = [b"<think>", b"</think>", b"\n", b"\n\n", b"hello", b" world", b"{", b'"a"', b":",
             b" ", b"1", b"}", b"</", b"think", b">", None]
    eos = len(vocab) - 1
    table = build_table(vocab, special_ids=(), eos_ids=(eos,))
    constraint = Constraint(GrammarRuntime(GrammarCache().get(thinking(SCHEMA)), table))
    ids = {b: i for i, b in enumerate(vocab) if b is not None}

    def allowed() -> set[bytes]:
        mask = constraint.mask()
        return {vocab[i] for i in np.flatnonzero(mask) if vocab[i] is not None}

    assert {b"<think>", b"{", b"\n"} <= allowed() and b"hello" not in allowed()
    for token in (b"<think>", b"\n", b"hello", b" world", b"</", b"think"):
        assert constraint.allows(ids[token])
        constraint.advance(ids[token])
    assert b"hello" in allowed() and b"<think>" in allowed()         # still reasoning
    constraint.advance(ids[b">"])                                    # "</" "think" ">" closes
    assert allowed() == {b"\n", b"\n\n", b"{"}                        # only the answer now
    for token in (b"\n\n", b"{", b'"a"', b":", b"1", b"}"):
        assert constraint.allows(ids[token])
        constraint.advance(ids[token])
    assert constraint.complete and constraint.allows(eos)


def test_qwen3_token_ids_think_then_answer_under_json_mode():
    """The real Qwen3 vocabulary (qwen3-tiny's tokenizer): `<think>` and `</think>` are single
    (non-special) tokens; a thinking answer in its own ids passes the constraint token by
    token, and once `</think>` is out a word the schema forbids is refused."""
    from engine.api import load_model
    from engine.grammar.constraint import Guides
    from tests.oracle import ORACLE_DIR
    tokenizer = load_model(str(ORACLE_DIR / "families" / "qwen3-tiny" / "model")).tokenizer
    guides = Guides(tokenizer, tokenizer.vocab_size, tokenizer.eos_token_ids)
    constraint = guides.constraint(GrammarCache().get(thinking(SCHEMA)))
    ids = tokenizer.encode('<think>\nThe user wants {"a": "x"}? No: an integer.\n</think>\n\n')
    assert tokenizer.encode("</think>") == [ids[-2]]              # one token
    for token in ids:
        assert constraint.allows(token), tokenizer.decode([token])
        constraint.advance(token)
    assert not constraint.allows(tokenizer.encode("Sure")[0])
    assert not constraint.mask()[tokenizer.encode("Sure")[0]]
    for token in tokenizer.encode('{"a": 7}'):
        assert constraint.allows(token)
        constraint.advance(token)
    assert constraint.complete and constraint.allows(tokenizer.eos_token_ids[0])


def test_the_engine_lets_a_forced_thought_through_and_constrains_the_answer_after_it():
    """qwen3-tiny through the real engine, greedy, the prompt ending inside `<think>` (as
    DeepSeek-R1's does) and `</think>` forced by logit_bias +100: with the prefix the grammar
    lets the tag through, and after it only JSON, bias or not; without the prefix the same
    bias cannot put the tag out."""
    from engine.api import EngineConfig, GenRequest, SamplingParams, load_model
    from engine.core.engine import Engine
    from tests.oracle import ORACLE_DIR
    model = load_model(str(ORACLE_DIR / "families" / "qwen3-tiny" / "model"))
    tokenizer = model.tokenizer
    close, = tokenizer.encode("</think>")
    prompt = tuple(tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"))
    cache = GrammarCache()

    def generate(spec: GrammarSpec) -> str:
        engine = Engine(model, EngineConfig(num_kv_blocks=64, max_num_seqs=2))
        params = SamplingParams(temperature=0.0, logit_bias=((close, 100.0),))
        engine.add_request(GenRequest(prompt=prompt, params=params, max_tokens=40,
                                      grammar=cache.get(spec)))
        tokens = []
        while engine.has_work():
            tokens += [out.token for out in engine.step()]
        return tokenizer.decode([t for t in tokens if t not in tokenizer.eos_token_ids])

    json_object = GrammarSpec("json_object")
    thought = generate(thinking(json_object, INSIDE))      # the prompt opened the tag
    assert thought.startswith("</think>")                  # the biased tag went through first
    answer = thought[len("</think>"):].lstrip("\n")
    assert answer.startswith("{") and "</think>" not in answer     # then only JSON, bias or not
    m, state = run(json_object, answer)
    assert state != DEAD                                   # a valid JSON prefix (or whole)
    assert not generate(json_object).startswith("</think>")        # no prefix: refused
