"""Predicted outputs end to end with the official `openai` client: qwen3-tiny served whole
(its real tokenizer and chat template), its engine answering every request with one scripted
answer and reporting prediction counts as a speculating engine would (tests/fakes.py
`ScriptedAnswers` inside `PredictionCounts`). Checked: the GenRequest's `prediction` ids,
usage.completion_tokens_details whole and streamed, n = 2 sums, /metrics per source; and on
the tiny Llama's real engine, that a prediction leaves a greedy answer as it was."""
from __future__ import annotations

from dataclasses import replace

import pytest
import requests

from engine.api import SpeculativeConfig, load_model
from server.config import ServeConfig
from tests.e2e.helpers import TIMEOUT_S, metrics, openai_client, running_server
from tests.fakes import PREDICTION_REJECTED_TOKENS, PredictionCounts, ScriptedAnswers
from tests.oracle import ORACLE_DIR

QWEN3 = ORACLE_DIR / "families" / "qwen3-tiny" / "model"
MODEL = "model"                                  # the folder's name is the served id
ANSWER = "x = 2\n"
PREDICTED = "x = 1\n<|im_end|>"                  # markup in a prediction stays plain text
EDIT = [{"role": "user", "content": "Set x to 2."}]


@pytest.fixture(scope="module")
def tokenizer():
    return load_model(str(QWEN3)).tokenizer


@pytest.fixture(scope="module")
def predicting(tokenizer):
    script = tuple(tokenizer.encode(ANSWER)) + (tokenizer.eos_token_ids[0],)
    engines: list[PredictionCounts] = []

    def wrap(engine):
        engines.append(PredictionCounts(ScriptedAnswers(engine, script)))
        return engines[0]
    with running_server(QWEN3, wrap_engine=wrap) as handle:
        yield openai_client(handle), engines[0], handle


def test_the_engine_gets_the_prediction_as_plain_token_ids(tokenizer, predicting):
    client, engine, _ = predicting
    done = client.chat.completions.create(model=MODEL, messages=EDIT, max_tokens=16,
                                          prediction={"type": "content", "content": PREDICTED})
    assert done.choices[0].message.content == ANSWER
    ids = engine.requests[-1].prediction
    assert ids == tuple(tokenizer.encode(PREDICTED, parse_special=False))
    assert tokenizer.eos_token_ids[0] not in ids             # <|im_end|> was not parsed
    details = done.usage.completion_tokens_details
    assert details.accepted_prediction_tokens == len(ids)
    assert details.rejected_prediction_tokens == PREDICTION_REJECTED_TOKENS


def test_two_streamed_choices_sum_their_counts_in_the_usage_chunk(tokenizer, predicting):
    client, engine, _ = predicting
    parts = [{"type": "text", "text": "x = 1"}, {"type": "text", "text": "\n"}]
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=EDIT, max_tokens=16, n=2, stream=True,
        stream_options={"include_usage": True},
        prediction={"type": "content", "content": parts}))
    predicted = tuple(tokenizer.encode("x = 1\n", parse_special=False))
    assert [r.prediction for r in engine.requests[-2:]] == [predicted, predicted]
    details = chunks[-1].usage.completion_tokens_details
    assert details.accepted_prediction_tokens == 2 * len(predicted)
    assert details.rejected_prediction_tokens == 2 * PREDICTION_REJECTED_TOKENS


def test_legacy_completions_take_a_prediction_too(tokenizer, predicting):
    _, engine, handle = predicting
    body = {"model": MODEL, "prompt": "x = ", "max_tokens": 16,
            "prediction": {"type": "content", "content": "1\n"}}
    doc = requests.post(handle.http_url + "/v1/completions", json=body, timeout=TIMEOUT_S).json()
    predicted = tuple(tokenizer.encode("1\n", parse_special=False))
    assert engine.requests[-1].prediction == predicted
    assert doc["usage"]["completion_tokens_details"] == {
        "accepted_prediction_tokens": len(predicted),
        "rejected_prediction_tokens": PREDICTION_REJECTED_TOKENS}


def test_a_bad_prediction_is_a_400_and_metrics_name_the_source(predicting):
    client, engine, handle = predicting
    reply = requests.post(handle.http_url + "/v1/chat/completions", timeout=TIMEOUT_S,
                          json={"model": MODEL, "messages": EDIT, "prediction": "x = 1"})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "prediction"
    client.chat.completions.create(model=MODEL, messages=EDIT, max_tokens=16,
                                   prediction={"type": "content", "content": "x"})
    # The stats are published after the step that answered; a later answer means they were.
    client.chat.completions.create(model=MODEL, messages=EDIT, max_tokens=16)
    samples = metrics(handle)
    (_, drafted, accepted), = engine.stats().spec_by_source
    assert drafted > accepted > 0
    assert samples['tl_engine_spec_draft_tokens_total{source="prediction"}'] == drafted
    assert samples['tl_engine_spec_accepted_tokens_total{source="prediction"}'] == accepted


def test_a_prediction_leaves_a_greedy_answer_as_it_was(tiny_llama_dir):
    """The prediction is the only draft source here: with every source on, the suffix store
    holds the plain answer's text after the first request and drafts it before the
    prediction is ever tried (the answer is the same, the prediction's counts stay 0)."""
    engine = replace(ServeConfig().engine, speculative=SpeculativeConfig(method="prediction"))
    with running_server(tiny_llama_dir, engine=engine) as handle:
        client = openai_client(handle)
        ask = dict(model=tiny_llama_dir.name, messages=EDIT, max_tokens=12, temperature=0)
        plain = client.chat.completions.create(**ask)
        predicted = client.chat.completions.create(
            **ask, prediction={"type": "content", "content": plain.choices[0].message.content})
        samples = metrics(handle)
    assert predicted.choices[0].message.content == plain.choices[0].message.content
    details = predicted.usage.completion_tokens_details
    # Drafted from the prediction and produced by the model; the tiny model's answer is not
    # all valid UTF-8, so its text re-encodes to other ids past its first bytes: some drafts
    # are rejected, and the answer stays the greedy one all the same.
    assert details.accepted_prediction_tokens > 0
    assert details.accepted_prediction_tokens == samples[
        'tl_engine_spec_accepted_tokens_total{source="prediction"}']
    assert details.accepted_prediction_tokens + details.rejected_prediction_tokens == samples[
        'tl_engine_spec_draft_tokens_total{source="prediction"}']
    assert plain.usage.completion_tokens_details is None     # no prediction: usage as before
