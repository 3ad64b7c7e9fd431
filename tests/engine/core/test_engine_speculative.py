"""Prompt-lookup speculation: drafts from the context, identical output to plain decoding.

(The other draft sources and the draft-length rule: test_draft_sources.py, test_draft_policy.py.)"""
from dataclasses import replace

import numpy as np
import pytest

from engine.api import (EngineConfig, GenRequest, InvalidConfig, SamplingParams, SpeculativeConfig,
                        check_speculative_config)
from engine.core.engine import Engine
from engine.core.drafts.lookup import propose
from tests.engine.core.engine_models import frozen_clock, random_model, run_to_completion, succ_model, tokens_of

SPEC = SpeculativeConfig(method="prompt_lookup", num_speculative_tokens=4, prompt_lookup_min=1,
                         prompt_lookup_max=3)


def test_propose_follows_the_latest_earlier_match_of_the_longest_ngram():
    cfg = SpeculativeConfig(num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=2)
    assert propose([1, 2, 3, 4, 1, 2, 5, 6, 1, 2], cfg, 10) == [5, 6, 1]
    assert propose([7, 8, 9, 7], cfg, 10) == [8, 9, 7]          # falls back to a 1-gram
    assert propose([1, 2, 3], cfg, 10) == []
    assert propose([1, 2, 1, 2], cfg, 1) == [1]                  # capped by the room left
    # A loop: the latest match is one period back; its continuation repeats past the end.
    long = SpeculativeConfig(num_speculative_tokens=32, prompt_lookup_min=1, prompt_lookup_max=2)
    assert propose([9, 5, 6, 7, 5, 6, 7], long, 8) == [5, 6, 7, 5, 6, 7, 5, 6]
    assert propose([9, 5, 6, 7, 5, 6, 7], cfg, 8) == [5, 6, 7]   # the config's cap


def test_check_config_names_the_refused_field():
    check_speculative_config(SpeculativeConfig())
    refusals = [
        (SpeculativeConfig(method="medusa"), "speculative.method", "'medusa'"),
        (SpeculativeConfig(num_speculative_tokens=0), "speculative.num_speculative_tokens", ">= 1"),
        (SpeculativeConfig(prompt_lookup_min=0), "speculative.prompt_lookup_min", ">= 1"),
        (SpeculativeConfig(prompt_lookup_max=True), "speculative.prompt_lookup_max", "integer"),
        (SpeculativeConfig(prompt_lookup_min=3, prompt_lookup_max=2), "speculative.prompt_lookup_min",
         "<= prompt_lookup_max"),
    ]
    for spec, field, words in refusals:
        with pytest.raises(InvalidConfig) as info:
            check_speculative_config(spec)
        assert info.value.field == field and words in str(info.value), str(info.value)
    with pytest.raises(ValueError, match="speculative.num_speculative_tokens"):   # the engine checks too
        Engine(succ_model(), EngineConfig(speculative=SpeculativeConfig(num_speculative_tokens=0)))


def run(model, prompts, params, spec, seeds=None, **config):
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=128, speculative=spec, **config),
                    clock=frozen_clock)
    ids = [engine.add_request(GenRequest(prompt=p, params=params, max_tokens=24,
                                         seed=None if seeds is None else seeds[i]))
           for i, p in enumerate(prompts)]
    outs = run_to_completion(engine)
    return engine, [tokens_of(outs[i]) for i in ids]


def repetitive_prompts(model):
    rng = np.random.default_rng(5)
    passages = [tuple(int(t) for t in rng.integers(0, 64, 6)) for _ in range(4)]
    # "repeat the passage": the passage, then its start again -- plus the model's own loops
    return [p * 3 + p[:2] for p in passages]


def test_greedy_speculative_output_equals_plain_decoding():
    model = random_model(seed=2)
    prompts = repetitive_prompts(model)
    greedy = SamplingParams(temperature=0.0)
    _, plain = run(model, prompts, greedy, None)
    engine, spec = run(model, prompts, greedy, SPEC)
    assert spec == plain
    stats = engine.stats()
    assert stats.spec_draft_tokens > 0
    assert 0 < stats.spec_accepted_tokens <= stats.spec_draft_tokens


def test_seeded_speculative_output_equals_seeded_plain_decoding():
    model = random_model(seed=2)
    prompts = repetitive_prompts(model)
    hot = SamplingParams(temperature=0.7)
    _, plain = run(model, prompts, hot, None, seeds=[1, 2, 3, 4])
    _, spec = run(model, prompts, hot, SPEC, seeds=[1, 2, 3, 4], max_batched_tokens=9)
    assert spec == plain


def test_accepted_drafts_give_several_tokens_per_step_and_stop_in_the_middle():
    model = succ_model()
    prompt = tuple(range(97, 107)) + tuple(range(97, 100))        # "abcdefghij" + "abc"
    engine = Engine(model, EngineConfig(speculative=SPEC), clock=frozen_clock)
    rid = engine.add_request(GenRequest(prompt=prompt, params=SamplingParams(temperature=0.0),
                                        max_tokens=20, stop_ids=(103,)))
    first = engine.step()                                         # prefill: one token (d)
    second = engine.step()                                        # drafts e f g ...: g stops
    assert tokens_of(first) == [100]
    assert tokens_of(second) == [101, 102, 103] and second[-1].finish == "stop"
    assert {o.id for o in first + second} == {rid}
    stats = engine.stats()
    assert stats.spec_draft_tokens >= stats.spec_accepted_tokens >= 2            # e f (g: stop) held; any after g unused
    assert stats.kv_blocks_used == 0 and not engine.has_work()


def test_a_loop_is_drafted_whole_and_answers_as_plain_decoding():
    """A model caught in a loop of period 3 (5 -> 6 -> 7 -> 5): prompt lookup's
    continuation, repeated past the context's end, drafts the loop many tokens at a time
    (it stopped at the context's end before: 3 a step), and the answer is plain decoding's."""
    model = succ_model()
    head = model.weights.lm_head.copy()
    head[7] = 0.0
    head[7, 5] = 20.0                                             # 7 -> 5 closes the loop
    loop = replace(model, weights=replace(model.weights, lm_head=head))
    prompt, greedy = (9, 5, 6, 7, 5, 6, 7), SamplingParams(temperature=0.0)
    spec = SpeculativeConfig(method="prompt_lookup", prompt_lookup_min=1, prompt_lookup_max=3)
    answers, most_accepted_in_a_step = [], 0
    for config in (None, spec):
        engine = Engine(loop, EngineConfig(block_size=4, num_kv_blocks=128, speculative=config),
                        clock=frozen_clock)
        rid = engine.add_request(GenRequest(prompt=prompt, params=greedy, max_tokens=40))
        tokens = []
        while engine.has_work():
            before = engine.stats().spec_accepted_tokens
            tokens += [o.token for o in engine.step() if o.id == rid]
            most_accepted_in_a_step = max(most_accepted_in_a_step, engine.stats().spec_accepted_tokens - before)
        answers.append(tokens)
    assert answers[0] == answers[1] == [5, 6, 7] * 13 + [5]
    stats = engine.stats()
    assert stats.spec_accepted_tokens == stats.spec_draft_tokens >= 24   # of 39 after the first
    assert most_accepted_in_a_step > 3                            # more than one period at once


def test_a_draft_never_reaches_past_max_tokens():
    """The loop above drafts 32 a step where it can; with `max_tokens` 10 every draft stops
    one short of the tokens left (the verified row after the last one gives a token too), so
    no verified row is thrown away and every drafted token is accepted."""
    model = succ_model()
    head = model.weights.lm_head.copy()
    head[7] = 0.0
    head[7, 5] = 20.0
    loop = replace(model, weights=replace(model.weights, lm_head=head))
    spec = SpeculativeConfig(method="prompt_lookup", prompt_lookup_min=1, prompt_lookup_max=3)
    engine = Engine(loop, EngineConfig(block_size=4, num_kv_blocks=128, speculative=spec),
                    clock=frozen_clock)
    max_tokens = 10
    rid = engine.add_request(GenRequest(prompt=(9, 5, 6, 7, 5, 6, 7),
                                        params=SamplingParams(temperature=0.0), max_tokens=max_tokens))
    tokens, largest_draft = [], 0
    while engine.has_work():
        drafted_before, left = engine.stats().spec_draft_tokens, max_tokens - len(tokens)
        out = [o for o in engine.step() if o.id == rid]
        drafted = engine.stats().spec_draft_tokens - drafted_before
        assert drafted <= left - 1 or drafted == 0, (drafted, left)
        largest_draft = max(largest_draft, drafted)
        tokens += [o.token for o in out]
    assert tokens == ([5, 6, 7] * 4)[:max_tokens]
    stats = engine.stats()
    assert largest_draft >= 3                                     # it did draft, several at once
    assert stats.spec_accepted_tokens == stats.spec_draft_tokens


# --------------------------------------------------------------------------- where it is free

def test_a_sequence_whose_drafts_keep_missing_pauses_drafting_and_answers_the_same():
    """succ always says k+1; the prompt pairs every k with 100+k, so each draft (100+k ...)
    is rejected: drafting pauses 1, 2, 4 ... steps, and the answer is plain decoding's."""
    from engine.core.speculative import pause_after
    model = succ_model()
    prompt = tuple(t for k in range(10, 30) for t in (k, 100 + k)) + (9,)     # 41 of 64 positions
    spec = SpeculativeConfig(method="prompt_lookup", num_speculative_tokens=2, prompt_lookup_min=1,
                             prompt_lookup_max=1)
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=128, speculative=spec), clock=frozen_clock)
    rid = engine.add_request(GenRequest(prompt=prompt, params=SamplingParams(temperature=0.0),
                                        max_tokens=20))
    steps_with_drafts, tokens = 0, []
    while engine.has_work():
        before = engine.stats().spec_draft_tokens
        tokens += [o.token for o in engine.step() if o.id == rid]
        steps_with_drafts += engine.stats().spec_draft_tokens > before
    assert tokens == list(range(10, 30))                         # succ's answer, unchanged
    assert engine.stats().spec_accepted_tokens == 0
    assert 3 <= steps_with_drafts <= 5                           # 1, 2, 4, 8 steps apart, not 19
    assert [pause_after(m) for m in range(6)] == [0, 1, 2, 4, 8, 16]
