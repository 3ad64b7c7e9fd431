"""Every engine feature for every family, checked against the dense reference.

Each test runs one engine feature (paged KV with small blocks, chunked prefill, the radix
prefix cache, preemption, speculation (every draft source), n > 1 forks, prompt logprobs,
embeddings, JSON-schema grammars) on a tiny random model of each family
(tests/engine/core/family_models.py) and compares it with the dense forward of
engine/model/llama.py: greedy tokens token for token, logprobs within LOGPROB_ATOL. The
feature's own effect is asserted too (the cache hit, the preemption, the accepted drafts),
so a test cannot pass by not exercising it. Seeded mixes run them all at once in a tight
pool (forks, drafts, chunks, shared starts, preemption). The first test shows that each
family's options and weights move the logits far from a plain Llama's, so a skipped family
path shows.

Prompts are several of gemma3's WINDOW_TOKENS long; for gemma3 the last test also checks,
across prefill chunks and a cached prefix longer than the window, that the engine agrees
with the windowed reference and NOT with the same model without windows
(test_sliding_window.py covers the window's maths on its own).
"""
from __future__ import annotations

import dataclasses
import json

import jsonschema
import numpy as np
import pytest

from engine.api import EngineConfig, GenRequest, PromptLogprobs, SamplingParams, SpeculativeConfig
from engine.core.engine import Engine
from engine.grammar.compile import GrammarCache, schema_spec
from engine.grammar.constraint import Guides
from engine.model import llama
from engine.model.spec import FamilyOptions
from tests.engine.core.engine_models import (GREEDY, dense_greedy, frozen_clock, run_embeddings,
                                             run_to_completion, tokens_of)
from tests.engine.core.family_models import (EOS_ID, FAMILY_NAMES, ROPE_THETA, WINDOW_TOKENS,
                                             dense_embedding, dense_log_softmax, dense_logprobs,
                                             family_model, unwindowed)

LOGPROB_ATOL = 1e-4          # float32 paged vs dense, reordered sums: ~1e-6 seen
EMBED_ATOL = 1e-5
FAMILY_EFFECT = 0.5          # a family's options move some logprob by at least this much
WINDOW_EFFECT = 0.05         # a windowless reference is off by at least this much somewhere
NEW_TOKENS = 10
# Random models rarely continue a passage; over this many prompts and tokens each family's
# greedy runs repeat themselves often enough that drafts (from 1-grams up) are accepted.
SPEC_PASSAGES = 8
SPEC_TOKENS = 40
JSON_TOKENS = 120            # SCHEMA's text with MAX_WS_CHARS of whitespace at every gap fits
BLOCK = 4
MIXED_TRIALS = 4
MIXED_SEED = 100
MIXED_PROMPTS = 5
MIXED_ROOM_TOKENS = 45       # the pool: a little more than the longest prompt + its tokens
GREEDY_LOGPROBS = SamplingParams(temperature=0.0, logprobs=True)
PROMPTS = tuple(tuple(int(t) for t in np.random.default_rng(n).integers(0, 256, n))
                for n in (23, 31, 13))
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "ok": {"type": "boolean"}},
          "required": ["n", "ok"], "additionalProperties": False}

per_family = pytest.mark.parametrize("family", FAMILY_NAMES)


def _run(model, requests, **config) -> tuple[Engine, list[list]]:
    """Run the requests on one engine (KV blocks of BLOCK tokens); each one's outputs. Its
    clock is frozen: speculation keeps its priors, whatever the machine's speed."""
    settings = dict(block_size=BLOCK, num_kv_blocks=128) | config
    engine = Engine(model, EngineConfig(**settings), clock=frozen_clock)
    ids = [engine.add_request(r) for r in requests]
    outs = run_to_completion(engine)
    return engine, [outs[i] for i in ids]


def _greedy(prompt, max_tokens=NEW_TOKENS, **kw) -> GenRequest:
    return GenRequest(prompt=prompt, params=GREEDY_LOGPROBS, max_tokens=max_tokens, **kw)


def _assert_dense(model, prompt, outs) -> None:
    """Tokens equal the dense greedy run; their logprobs the dense log-softmax."""
    got = tokens_of(outs)
    assert got == dense_greedy(model, prompt, len(got)) and len(got) == NEW_TOKENS
    np.testing.assert_allclose([o.logprob for o in outs], dense_logprobs(model, prompt, got),
                               atol=LOGPROB_ATOL)


@per_family
def test_the_family_options_and_weights_change_the_logits(family):
    """Against the same model read as a plain Llama (no options, no extra weights): the
    family's paths matter here, so the engine tests below would catch a path it skipped."""
    model = family_model(family)
    bare = tuple(dataclasses.replace(layer, bqkv=None, q_norm=None, k_norm=None,
                                     post_attn_norm=None, post_mlp_norm=None)
                 for layer in model.weights.layers)
    plain = dataclasses.replace(model, config=dataclasses.replace(model.config, options=FamilyOptions(),
                                                                  rope_theta=ROPE_THETA),
                                weights=dataclasses.replace(model.weights, layers=bare))
    prompt = PROMPTS[1]
    off = np.abs(dense_log_softmax(model, prompt) - dense_log_softmax(plain, prompt)).max()
    assert off > FAMILY_EFFECT, off


@pytest.mark.parametrize("config", [dict(prefill_chunk=512), dict(block_size=2),
                                    dict(prefill_chunk=5, max_batched_tokens=12)],
                         ids=["paged", "tiny-blocks", "chunked"])
@per_family
def test_batched_paged_and_chunked_runs_equal_dense(family, config):
    model = family_model(family)
    engine, outs = _run(model, [_greedy(p) for p in PROMPTS], **config)
    for prompt, out in zip(PROMPTS, outs):
        _assert_dense(model, prompt, out)
    assert engine.stats().steps_total >= NEW_TOKENS


@per_family
@pytest.mark.parametrize("shared", [6 * BLOCK, 6 * BLOCK + 3], ids=["whole-blocks", "part-block"])
def test_a_cached_prefix_is_hit_and_the_answer_still_equals_dense(family, shared):
    """24 or 27 shared tokens (3 windows and more); the part block's rows are copied."""
    model = family_model(family)
    first = PROMPTS[1]
    second = first[:shared] + PROMPTS[2][:9]
    engine = Engine(model, EngineConfig(block_size=BLOCK, num_kv_blocks=128, prefill_chunk=7))
    a = engine.add_request(_greedy(first))
    outs = run_to_completion(engine)
    b = engine.add_request(_greedy(second))
    outs |= run_to_completion(engine)
    assert engine.stats().prefix_hit_tokens == shared
    _assert_dense(model, first, outs[a])
    _assert_dense(model, second, outs[b])


@per_family
def test_preemption_in_a_tiny_pool_leaves_the_outputs_unchanged(family):
    model = family_model(family)
    engine, outs = _run(model, [_greedy(p[:10]) for p in PROMPTS],
                        num_kv_blocks=9, prefix_cache="none")
    assert engine.stats().preemptions_total >= 1
    for prompt, out in zip(PROMPTS, outs):
        _assert_dense(model, prompt[:10], out)


@per_family
def test_speculation_accepts_drafts_and_changes_nothing(family):
    """Every draft source on ("auto"): repetitive prompts for prompt lookup, and a
    prediction (the plain answer with its second half changed) that is partly accepted."""
    model = family_model(family)
    rng = np.random.default_rng(7)
    passages = [tuple(int(t) for t in rng.integers(0, 256, 6)) for _ in range(SPEC_PASSAGES)]
    prompts = [p * 3 + p[:2] for p in passages]            # "repeat the passage"
    requests = [GenRequest(prompt=p, params=GREEDY, max_tokens=SPEC_TOKENS) for p in prompts]
    _, plain = _run(model, requests)
    half = SPEC_TOKENS // 2
    requests = [dataclasses.replace(r, prediction=tuple(tokens_of(o)[:half]) + tuple(range(half)))
                for r, o in zip(requests, plain)]
    spec = SpeculativeConfig(num_speculative_tokens=4, prompt_lookup_min=1, prompt_lookup_max=3)
    engine, drafted = _run(model, requests, speculative=spec)
    assert [tokens_of(o) for o in drafted] == [tokens_of(o) for o in plain]
    assert [tokens_of(o) for o in plain] == [dense_greedy(model, p, SPEC_TOKENS) for p in prompts]
    by_source = {name: (drafted, accepted) for name, drafted, accepted in engine.stats().spec_by_source}
    assert by_source["prediction"][0] > by_source["prediction"][1] > 0


@per_family
def test_forks_share_the_prompt_and_choose_alike(family):
    model = family_model(family)
    prompt = PROMPTS[1]
    engine, outs = _run(model, [_greedy(prompt, wait_for_prefix=j > 0) for j in range(3)],
                        prefill_chunk=8)
    shared_tokens = (len(prompt) - 1) // BLOCK * BLOCK
    assert engine.stats().prefix_hit_tokens == 2 * shared_tokens
    for out in outs:
        _assert_dense(model, prompt, out)


@per_family
def test_prompt_logprobs_equal_the_dense_log_softmax(family):
    model = family_model(family)
    prompt = PROMPTS[1]
    _, (outs,) = _run(model, [_greedy(prompt, prompt_logprobs=3)], prefill_chunk=5)
    scored = [o for o in outs if isinstance(o, PromptLogprobs)]
    tokens = [t for s in scored for t in s.tokens]
    logprobs = [lp for s in scored for lp in s.logprobs]
    dense = dense_log_softmax(model, prompt)                                # [P, V]
    assert len(scored) > 1 and scored[-1].complete and tokens == list(prompt[1:])
    np.testing.assert_allclose(logprobs, dense[np.arange(len(prompt) - 1), prompt[1:]],
                               atol=LOGPROB_ATOL)


@per_family
def test_embeddings_equal_the_dense_mean_pooled_hidden_states(family):
    model = family_model(family)
    engine = Engine(model, EngineConfig(block_size=BLOCK, num_kv_blocks=128, prefill_chunk=5))
    for got, prompt in zip(run_embeddings(engine, PROMPTS), PROMPTS):
        np.testing.assert_allclose(got, dense_embedding(model, prompt), atol=EMBED_ATOL)


@per_family
@pytest.mark.parametrize("trial", range(MIXED_TRIALS))
def test_all_features_at_once_in_a_tight_pool_equal_dense(family, trial):
    """Seeded mixes: prompts sharing a start, every other one a fork, small blocks, chunks
    and step budgets, a pool little bigger than one sequence, drafts on odd trials. (Trial
    2 once never finished: a cached chain counted as one free block.)"""
    model = family_model(family)
    rng = np.random.default_rng(MIXED_SEED + trial)
    start = tuple(int(t) for t in rng.integers(0, 256, 20))
    prompts = [start[:int(rng.integers(5, 20))]
               + tuple(int(t) for t in rng.integers(0, 256, int(rng.integers(1, 12))))
               for _ in range(MIXED_PROMPTS)]
    block = int(rng.choice([2, 4, 8]))
    spec = SpeculativeConfig(num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=2)
    config = dict(block_size=block, num_kv_blocks=-(-MIXED_ROOM_TOKENS // block) + int(rng.integers(0, 3)),
                  prefill_chunk=int(rng.integers(3, 12)), max_batched_tokens=int(rng.integers(12, 40)),
                  speculative=spec if trial % 2 else None)
    requests = [GenRequest(prompt=p, params=GREEDY, max_tokens=NEW_TOKENS, wait_for_prefix=j % 2 == 1)
                for j, p in enumerate(prompts)]
    engine, outs = _run(model, requests, **config)
    assert [tokens_of(o) for o in outs] == [dense_greedy(model, p, NEW_TOKENS) for p in prompts]
    assert engine.stats().prefix_hit_tokens > 0


def _dense_guided_greedy(model, prompt, grammar, max_tokens: int) -> list[int]:
    """Greedy over the dense logits with the grammar's mask, recomputing the whole sequence."""
    eos = model.config.eos_token_ids
    guide = Guides(model.tokenizer, model.config.vocab_size, eos).constraint(grammar)
    seq, out = list(prompt), []
    while len(out) < max_tokens and not guide.finished:
        logits = llama.forward(model.config, model.weights, seq)[-1]          # [V]
        token = int(np.argmax(np.where(guide.mask(), logits, -np.inf)))
        guide.advance(token)
        seq.append(token)
        out.append(token)
        if token in eos:
            break
    return out


@per_family
def test_a_schema_constrained_greedy_run_obeys_and_equals_dense_masked_greedy(family):
    model = family_model(family, eos=(EOS_ID,))
    grammar = GrammarCache().get(schema_spec(SCHEMA))
    requests = [GenRequest(prompt=p, params=GREEDY, max_tokens=JSON_TOKENS, grammar=grammar)
                for p in PROMPTS]
    _, outs = _run(model, requests, prefill_chunk=5)
    for prompt, out in zip(PROMPTS, outs):
        got = tokens_of(out)
        assert out[-1].finish == "stop" and got[-1] == EOS_ID
        jsonschema.validate(json.loads(model.tokenizer.decode(got[:-1])), SCHEMA)
        assert got == _dense_guided_greedy(model, prompt, grammar, JSON_TOKENS)


def test_gemma3_windows_hold_across_chunks_and_cached_prefixes():
    """The engine agrees with the windowed reference and not with a windowless one, with
    prefill chunks and a cached prefix both longer than the window."""
    model = family_model("gemma3")
    blind = unwindowed(model)
    first, shared = PROMPTS[1], 6 * BLOCK
    second = first[:shared] + PROMPTS[0][:7]
    engine = Engine(model, EngineConfig(block_size=BLOCK, num_kv_blocks=128,
                                        prefill_chunk=WINDOW_TOKENS + 3))
    a = engine.add_request(_greedy(first, prompt_logprobs=0))
    outs = run_to_completion(engine)
    b = engine.add_request(_greedy(second))
    outs |= run_to_completion(engine)
    assert engine.stats().prefix_hit_tokens == shared
    scored = [lp for o in outs[a] if isinstance(o, PromptLogprobs) for lp in o.logprobs]
    rows = np.arange(len(first) - 1)
    for ref, close in ((model, True), (blind, False)):
        want = dense_log_softmax(ref, first)[rows, first[1:]]
        assert np.allclose(scored, want, atol=LOGPROB_ATOL) == close
        sampled = [o for o in outs[b] if not isinstance(o, PromptLogprobs)]
        want_b = dense_logprobs(ref, second, tokens_of(sampled))
        off = np.abs(np.asarray([o.logprob for o in sampled]) - want_b).max()
        assert (off <= LOGPROB_ATOL) if close else (off >= WINDOW_EFFECT), off
