"""Constrained decoding through the engine, on the tiny test Llama (byte-level BPE vocab).

The property test: random schemas from a seeded generator x prompts x seeds at
temperature 1.0; every output parses and validates with `jsonschema` (format checker on)
and, with max_tokens large enough, finishes "stop"."""
from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest

from engine.api import EngineConfig, GenRequest, SamplingParams, load_model
from engine.core.engine import Engine
from engine.grammar.compile import GrammarCache, GrammarSpec, schema_spec
from tests import models
from tests.engine.grammar.schemas import random_schema

PROMPTS = ("Give me JSON:", "A person record", "{")
MAX_TOKENS = 400
FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load_model(models.write_tiny_llama(tmp_path_factory.mktemp("g") / "tiny"))


def run(model, requests, config=EngineConfig(num_kv_blocks=512, max_num_seqs=16)):
    engine = Engine(model, config)
    ids = [engine.add_request(r) for r in requests]
    tokens = {i: [] for i in ids}
    outs = {i: [] for i in ids}
    finish = {}
    while engine.has_work():
        for out in engine.step():
            tokens[out.id].append(out.token)
            outs[out.id].append(out)
            if out.finish:
                finish[out.id] = out.finish
    return [(tokens[i], finish[i], outs[i]) for i in ids], engine


def text_of(model, tokens):
    eos = set(model.config.eos_token_ids)
    return model.tokenizer.decode([t for t in tokens if t not in eos])


def test_property_random_schemas_always_validate_and_stop(tiny):
    rng = random.Random(20240726)
    cache = GrammarCache()
    tok = tiny.tokenizer
    requests, schemas = [], []
    for case in range(24):
        schema = random_schema(rng)
        grammar = cache.get(schema_spec(schema))
        for seed in (case, case + 1000):
            requests.append(GenRequest(prompt=tuple(tok.encode(PROMPTS[case % len(PROMPTS)])),
                                       params=SamplingParams(temperature=1.0), seed=seed,
                                       max_tokens=MAX_TOKENS, grammar=grammar))
            schemas.append(schema)
    results, _ = run(tiny, requests)
    for schema, (tokens, finish, _) in zip(schemas, results):
        text = text_of(tiny, tokens)
        assert finish == "stop", (schema, text)
        jsonschema.validate(json.loads(text), schema, format_checker=FORMAT_CHECKER)


def test_json_object_mode_and_length_cut(tiny):
    grammar = GrammarCache().get(GrammarSpec("json_object"))
    prompt = tuple(tiny.tokenizer.encode("json"))
    (full, cut), _ = run(tiny, [GenRequest(prompt=prompt, seed=1, max_tokens=MAX_TOKENS, grammar=grammar,
                                           params=SamplingParams(temperature=0.7)),
                                GenRequest(prompt=prompt, seed=1, max_tokens=3, grammar=grammar,
                                           params=SamplingParams(temperature=0.7))])
    assert isinstance(json.loads(text_of(tiny, full[0])), dict)
    assert cut[1] == "length" and len(cut[0]) == 3


def test_allow_everything_grammar_keeps_greedy_outputs(tiny):
    everything = GrammarCache().get(GrammarSpec("text"))
    prompts = [tuple(tiny.tokenizer.encode(p)) for p in PROMPTS]
    greedy = SamplingParams(temperature=0.0)
    plain, _ = run(tiny, [GenRequest(prompt=p, params=greedy, max_tokens=40) for p in prompts])
    guided, _ = run(tiny, [GenRequest(prompt=p, params=greedy, max_tokens=40, grammar=everything)
                           for p in prompts])
    assert [t for t, _, _ in plain] == [t for t, _, _ in guided]


def test_seeded_and_batch_invariant_with_logprobs_over_the_masked_distribution(tiny):
    grammar = GrammarCache().get(schema_spec({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "string", "maxLength": 4}}, "required": ["a", "b"]}))
    prompt = tuple(tiny.tokenizer.encode("json"))
    params = SamplingParams(temperature=1.0, top_p=0.9, logprobs=True, top_logprobs=3)
    alone, _ = run(tiny, [GenRequest(prompt=prompt, seed=7, params=params, max_tokens=MAX_TOKENS, grammar=grammar)])
    others = [GenRequest(prompt=prompt, seed=s, params=params, max_tokens=MAX_TOKENS, grammar=grammar)
              for s in (1, 2, 3)]
    batched, _ = run(tiny, others[:2] + [GenRequest(prompt=prompt, seed=7, params=params,
                                                    max_tokens=MAX_TOKENS, grammar=grammar)] + others[2:])
    assert alone[0][0] == batched[2][0]
    for out in alone[0][2]:
        assert all(np.isfinite(lp) for _, lp in out.top_logprobs)
        listed = dict(out.top_logprobs)
        assert out.token not in listed or listed[out.token] == out.logprob
    first = alone[0][2][0]                   # the first character must be "{": its masked mass is 1
    assert tiny.tokenizer.decode([first.token]) == "{" and first.logprob == pytest.approx(0.0, abs=1e-6)


def test_min_tokens_cannot_extend_a_complete_grammar(tiny):
    grammar = GrammarCache().get(GrammarSpec("choice", json.dumps(["yes"])))
    prompt = tuple(tiny.tokenizer.encode("ok?"))
    (res,), _ = run(tiny, [GenRequest(prompt=prompt, seed=3, max_tokens=50, grammar=grammar,
                                      params=SamplingParams(temperature=1.0, min_tokens=20))])
    assert text_of(tiny, res[0]) == "yes" and res[1] == "stop"
