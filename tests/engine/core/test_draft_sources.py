"""Every draft source changes nothing: speculation on == off, token for token.

For each source alone (`SpeculativeConfig(method=<source>)`) and for all of them ("auto"),
greedy and seeded sampling (same seeds), the same requests run with speculation off and
on, in each scenario: plain, stop ids, `max_tokens` ending where drafts would go on,
preemption in a tiny KV pool, and n > 1 forks (`wait_for_prefix`). Each source is given
what it drafts from -- a prediction (half the plain answer, then tokens of its own), an
earlier pass of the same requests (the suffix store's documents), repetitive prompts
(prompt lookup) -- and must have drafted and had drafts accepted, so a test cannot pass
by not speculating. The grammar source runs on a byte-vocabulary model with a JSON
schema, with its forced drafts and with a walk of the grammar's allowed tokens.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.api import EngineConfig, GenRequest, SamplingParams, SpeculativeConfig
from engine.core.engine import Engine
from engine.grammar.compile import GrammarCache, schema_spec
from engine.grammar.constraint import Constraint
from tests.engine.core.engine_models import GREEDY, frozen_clock, random_model, run_to_completion, tokens_of
from tests.engine.core.family_models import family_model

BLOCK = 4
MAX_TOKENS = 24
SHORT_MAX_TOKENS = 13          # ends while a long prediction draft would go on
TINY_POOL_BLOCKS = 24          # 4 requests of ~26 + 24 tokens cannot all hold their blocks
SEEDED = SamplingParams(temperature=0.8)
SOURCES = ("prediction", "suffix", "prompt_lookup", "auto")
SCENARIOS = ("plain", "stop", "max_tokens", "preemption", "forks")
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "enum": ["alpha", "beta"]},
                                           "n": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["name", "n"], "additionalProperties": False}


def _prompts() -> list[tuple[int, ...]]:
    rng = np.random.default_rng(5)
    passages = [tuple(int(t) for t in rng.integers(0, 64, 6)) for _ in range(4)]
    return [p * 3 + p[:2] for p in passages]          # "repeat the passage": lookup has matches


def _requests(scenario: str, params: SamplingParams, plain: list[list[int]] | None = None,
              with_prediction: bool = False) -> list[GenRequest]:
    """The scenario's requests; `plain` (the answers without speculation) gives stop ids
    and predictions."""
    prompts = _prompts()
    if scenario == "forks":                               # one prompt, n = 4
        prompts = [prompts[0]] * 4
    requests = []
    for i, prompt in enumerate(prompts):
        extra = {}
        if scenario == "stop" and plain is not None:
            extra["stop_ids"] = (plain[i][MAX_TOKENS // 2],)   # a token it produces midway
        if with_prediction and plain is not None:
            half = plain[i][:MAX_TOKENS // 2]
            extra["prediction"] = tuple(half) + tuple((t + 7) % 64 for t in plain[i][MAX_TOKENS // 2:])
        requests.append(GenRequest(
            prompt=prompt, params=params, seed=100 + i if params is SEEDED else None,
            max_tokens=SHORT_MAX_TOKENS if scenario == "max_tokens" else MAX_TOKENS,
            wait_for_prefix=scenario == "forks" and i > 0, **extra))
    return requests


def _engine(model, spec: SpeculativeConfig | None, scenario: str) -> Engine:
    blocks = TINY_POOL_BLOCKS if scenario == "preemption" else 256
    return Engine(model, EngineConfig(block_size=BLOCK, num_kv_blocks=blocks, speculative=spec,
                                      prefix_cache="none" if scenario == "preemption" else "radix"),
                  clock=frozen_clock)


def _answers(engine: Engine, requests: list[GenRequest], passes: int = 1) -> list[list]:
    """Run the requests `passes` times, one pass after another; the last pass's outputs."""
    for _ in range(passes):
        ids = [engine.add_request(r) for r in requests]
        outs = run_to_completion(engine)
    return [outs[i] for i in ids]


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("source", SOURCES)
def test_speculation_on_equals_off_token_for_token(source, scenario, params):
    model = random_model(seed=2)
    first = [tokens_of(o) for o in _answers(_engine(model, None, "plain"), _requests(scenario, params))]
    requests = _requests(scenario, params, first, with_prediction=source in ("prediction", "auto"))
    passes = 2 if source in ("suffix", "auto") else 1     # the first pass fills the suffix store
    off = _answers(_engine(model, None, scenario), requests, passes)
    engine = _engine(model, SpeculativeConfig(method=source, prompt_lookup_min=1), scenario)
    on = _answers(engine, requests, passes)
    assert [tokens_of(o) for o in on] == [tokens_of(o) for o in off]
    assert [o[-1].finish for o in on] == [o[-1].finish for o in off]
    stats = engine.stats()
    by_source = {name: (drafted, accepted) for name, drafted, accepted in stats.spec_by_source}
    assert set(by_source) == ({"grammar", "prediction", "suffix", "prompt_lookup"} if source == "auto"
                              else {source})
    assert stats.spec_draft_tokens == sum(d for d, _ in by_source.values()) > 0
    assert stats.spec_accepted_tokens == sum(a for _, a in by_source.values()) <= stats.spec_draft_tokens
    # a random model seldom repeats its prompt: lookup's hits are left to the plain runs
    if source != "prompt_lookup" or scenario in ("plain", "max_tokens", "preemption"):
        assert stats.spec_accepted_tokens > 0
    if scenario == "stop":
        assert all(o[-1].finish == "stop" for o in on)
    if scenario == "preemption":
        assert stats.preemptions_total >= 1
    if scenario == "max_tokens":
        assert all(len(o) == SHORT_MAX_TOKENS for o in on)


@pytest.mark.parametrize("kind", ["matches", "half", "unrelated"])
def test_prediction_counts_run_to_the_finishing_token_and_add_up(kind):
    model = random_model(seed=2)
    prompts = _prompts()
    plain = [tokens_of(o) for o in _answers(_engine(model, None, "plain"), _requests("plain", GREEDY))]
    cut = {"matches": MAX_TOKENS, "half": MAX_TOKENS // 2, "unrelated": 0}[kind]
    predictions = [tuple(p[:cut]) + tuple((t + 7) % 64 for t in p[cut:]) for p in plain]
    requests = [GenRequest(prompt=q, params=GREEDY, max_tokens=MAX_TOKENS, prediction=pred)
                for q, pred in zip(prompts, predictions)]
    engine = _engine(model, SpeculativeConfig(method="prediction"), "plain")
    outs = _answers(engine, requests)
    assert [tokens_of(o) for o in outs] == plain
    finishing = [o[-1] for o in outs]
    for out in outs:         # running totals on each step's last token: never decreasing
        counts = [(o.accepted_prediction_tokens, o.rejected_prediction_tokens) for o in out]
        carried = [c for c in counts if c != (0, 0)]
        assert all(a <= b and r <= s for (a, r), (b, s) in zip(carried, carried[1:]))
        assert not carried or carried[-1] == counts[-1]
    if kind != "unrelated":  # ... so a request the server ends early has them before its finish
        assert any(c != (0, 0) for out in outs for c in
                   [(o.accepted_prediction_tokens, o.rejected_prediction_tokens) for o in out[:-1]])
    accepted = sum(o.accepted_prediction_tokens for o in finishing)
    rejected = sum(o.rejected_prediction_tokens for o in finishing)
    assert engine.stats().spec_by_source == (("prediction", accepted + rejected, accepted),)
    # Each verifying step also samples one token after its drafts (not drafted): at most
    # MAX_TOKENS - 1 (the first comes from the prefill) minus one per step are accepted.
    if kind == "matches":                 # long drafts, none missed
        assert rejected == 0 and accepted > len(prompts) * MAX_TOKENS * 3 // 4
    elif kind == "half":                  # the half that matches is mostly accepted, the rest missed
        assert len(prompts) * MAX_TOKENS // 4 < accepted < len(prompts) * MAX_TOKENS // 2 and rejected > 0
    else:                                 # differs from the first token on: never aligned, no drafts
        assert accepted == rejected == 0
    without = _answers(_engine(model, SpeculativeConfig(method="prompt_lookup"), "plain"), requests)
    assert all(o[-1].accepted_prediction_tokens == o[-1].rejected_prediction_tokens == 0 for o in without)


def _walk_allowed(self: Constraint, max_tokens: int) -> list[int]:
    """A stand-in for the grammar's forced drafts: the smallest allowed byte, step by step
    (right wherever the grammar allows one byte only; a guess elsewhere)."""
    probe, drafts = Constraint(self.runtime), []
    probe.state = self.state
    for _ in range(max_tokens):
        allowed = np.flatnonzero(probe.mask()[:256])              # bytes, not EOS
        if allowed.size == 0:
            break
        drafts.append(int(allowed[0]))
        probe.advance(drafts[-1])
    return drafts


@pytest.mark.parametrize("drafts", ["forced", "walk"])
@pytest.mark.parametrize("method", ["grammar", "auto"])
@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_grammar_drafts_change_nothing(monkeypatch, params, method, drafts):
    """The grammar's own forced text, and a walk of its allowed bytes (drafts that also
    guess where the model has a choice, so they are rejected more often)."""
    if drafts == "walk":
        monkeypatch.setattr(Constraint, "forced_drafts", _walk_allowed)
    model = family_model("llama", eos=(256,))
    grammar = GrammarCache().get(schema_spec(SCHEMA))
    prompts = [tuple(b"name? "), tuple(b"{}{}{} ok"), tuple(b"n=3 please")]
    requests = [GenRequest(prompt=p, params=params, max_tokens=60, grammar=grammar, seed=7 + i,
                           stop_ids=(ord("}"),) if i == 2 else ())
                for i, p in enumerate(prompts)]

    def answers(spec):
        engine = Engine(model, EngineConfig(block_size=BLOCK, num_kv_blocks=256, speculative=spec),
                        clock=frozen_clock)
        return engine, [tokens_of(o) for o in _answers(engine, requests)]

    _, off = answers(None)
    engine, on = answers(SpeculativeConfig(method=method, prompt_lookup_min=1))
    assert on == off
    json.loads(bytes(off[0][:-1]).decode())                      # the grammar held: a JSON answer
    by_source = {name: (drafted, accepted) for name, drafted, accepted in engine.stats().spec_by_source}
    assert by_source["grammar"][0] > by_source["grammar"][1] > 0


def test_step_records_count_drafted_and_accepted_rows_as_the_stats_do():
    model = random_model(seed=2)
    plain = [tokens_of(o) for o in _answers(_engine(model, None, "plain"), _requests("plain", GREEDY))]
    engine = _engine(model, SpeculativeConfig(), "plain")
    engine.record_steps = True
    for request in _requests("plain", GREEDY, plain, with_prediction=True):
        engine.add_request(request)
    drafted = accepted = 0
    while engine.has_work():
        engine.step()
        drafted += engine.last_step.drafted_rows
        accepted += engine.last_step.accepted_rows
    stats = engine.stats()
    assert (drafted, accepted) == (stats.spec_draft_tokens, stats.spec_accepted_tokens)
    assert drafted > accepted > 0


def test_the_policy_learns_the_step_cost_from_decode_steps_only():
    """Prefill steps (hundreds of compute-bound rows) would tilt the rows -> seconds fit
    away from the few-row steps drafts ride in: the policy's cost model skips them."""
    engine = Engine(random_model(seed=2), EngineConfig(block_size=BLOCK, num_kv_blocks=256, prefill_chunk=5,
                                                       speculative=SpeculativeConfig()))
    prompt = _prompts()[0]                                    # 20 tokens: 4 prefill pieces of 5
    engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=10))
    run_to_completion(engine)
    assert len(prompt) == 20
    assert engine.drafts.step_cost.steps == engine.stats().steps_total - 4 > 0
