"""Prompt scoring (GenRequest.prompt_logprobs): every prompt token's logprob and top-k equal
the log-softmax of the dense reference's logits, whatever the chunking, the batch or the
prefix cache; max_tokens 0 scores without sampling."""
from __future__ import annotations

import numpy as np
import pytest

from engine.api import FINISH_LENGTH, EngineConfig, GenRequest, PromptLogprobs, TokenOut
from engine.core.engine import Engine
from tests.engine.core.engine_models import GREEDY, logits_of, random_model, run_to_completion

TOP_K = 5


@pytest.fixture(scope="module")
def model():
    return random_model(vocab=64, seed=3)


def _dense_log_softmax(model, prompt) -> np.ndarray:
    logits = logits_of(model, list(prompt)).astype(np.float64)            # [P, V]
    logits -= logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def _scores(outs) -> tuple[list[int], list[float], list, bool]:
    tokens, logprobs, tops, complete = [], [], [], False
    for out in outs:
        if isinstance(out, PromptLogprobs):
            assert out.start == len(tokens) + 1                  # in order, no repeats
            tokens += out.tokens
            logprobs += out.logprobs
            tops += out.top_logprobs
            complete = complete or out.complete
    return tokens, logprobs, tops, complete


@pytest.mark.parametrize("chunk", [3, 16, 512])
def test_prompt_scores_equal_the_dense_log_softmax_at_every_position(model, chunk):
    rng = np.random.default_rng(chunk)
    prompt = tuple(int(t) for t in rng.integers(0, 64, 37))
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=64, prefill_chunk=chunk))
    rid = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=2,
                                        prompt_logprobs=TOP_K))
    outs = run_to_completion(engine)[rid]
    tokens, logprobs, tops, complete = _scores(outs)
    dense = _dense_log_softmax(model, prompt)                               # [P, V]
    assert complete and tokens == list(prompt[1:])
    expected = [dense[p - 1, prompt[p]] for p in range(1, len(prompt))]
    np.testing.assert_allclose(logprobs, expected, atol=1e-4)
    for p, top in enumerate(tops, start=1):
        best = np.argsort(-dense[p - 1], kind="stable")[:TOP_K]
        assert [t for t, _ in top] == best.tolist()
        np.testing.assert_allclose([lp for _, lp in top], dense[p - 1, best], atol=1e-4)
    first = next(o for o in outs if isinstance(o, TokenOut))
    assert first.token == int(np.argmax(dense[-1]))             # the sampling row is intact


def test_max_tokens_zero_scores_without_sampling_and_frees_its_blocks(model):
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=32))
    rid = engine.add_request(GenRequest(prompt=(1, 2, 3, 4, 5), max_tokens=0, prompt_logprobs=0))
    outs = run_to_completion(engine)[rid]
    assert isinstance(outs[-1], TokenOut) and outs[-1].token is None
    assert outs[-1].finish == FINISH_LENGTH
    tokens, logprobs, tops, complete = _scores(outs)
    assert complete and tokens == [2, 3, 4, 5] and tops == [()] * 4
    assert engine.stats().kv_blocks_used == 0


def test_one_token_prompt_is_complete_with_no_scores(model):
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=32))
    rid = engine.add_request(GenRequest(prompt=(7,), max_tokens=0, prompt_logprobs=2))
    assert _scores(run_to_completion(engine)[rid]) == ([], [], [], True)


def test_scoring_takes_no_cached_prefix_but_others_still_may(model):
    prompt = tuple(range(1, 18))                                 # 4 whole blocks of 4
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=64))
    engine.add_request(GenRequest(prompt=prompt, max_tokens=1))
    run_to_completion(engine)
    hits = engine.stats().prefix_hit_tokens
    rid = engine.add_request(GenRequest(prompt=prompt, max_tokens=1, prompt_logprobs=1))
    tokens, _, _, complete = _scores(run_to_completion(engine)[rid])
    assert complete and tokens == list(prompt[1:])               # every position scored
    assert engine.stats().prefix_hit_tokens == hits              # nothing taken from the cache
    engine.add_request(GenRequest(prompt=prompt, max_tokens=1))
    run_to_completion(engine)
    assert engine.stats().prefix_hit_tokens == hits + 16         # a plain request does


def test_batch_mates_and_preemption_do_not_repeat_or_change_scores(model):
    rng = np.random.default_rng(9)
    prompts = [tuple(int(t) for t in rng.integers(0, 64, n)) for n in (21, 9, 30)]
    engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=14, prefill_chunk=8))
    ids = [engine.add_request(GenRequest(prompt=p, params=GREEDY, max_tokens=6,
                                         prompt_logprobs=0)) for p in prompts]
    outs = run_to_completion(engine)
    assert engine.stats().preemptions_total > 0
    for rid, prompt in zip(ids, prompts):
        tokens, logprobs, _, complete = _scores(outs[rid])
        dense = _dense_log_softmax(model, prompt)
        assert complete and tokens == list(prompt[1:])
        np.testing.assert_allclose(logprobs, [dense[p - 1, prompt[p]]
                                              for p in range(1, len(prompt))], atol=1e-4)
