"""Thinking kept apart, end to end with the official `openai` client: qwen3-tiny served whole
(the real Qwen3 tokenizer and chat template, random weights that never think on their own),
its engine answering every request with a scripted thinking answer (tests/fakes.py
`ScriptedAnswers`), so the template, tokenizer, text layer and renderers are the real ones."""
from __future__ import annotations

import json

import openai
import pytest
import requests

from engine.api import load_model
from tests.e2e.helpers import openai_client, running_server
from tests.fakes import ScriptedAnswers
from tests.oracle import ORACLE_DIR

QWEN3 = ORACLE_DIR / "families" / "qwen3-tiny" / "model"
MODEL = "model"                                  # the folder's name is the served id
THOUGHT, ANSWER = "The user greets me; a JSON answer.", '{"greeting": "hello"}'
SCRIPT_TEXT = f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tokenizer():
    return load_model(str(QWEN3)).tokenizer


def serve(tokenizer, **overrides):
    script = tuple(tokenizer.encode(SCRIPT_TEXT)) + (tokenizer.eos_token_ids[0],)
    engines: list[ScriptedAnswers] = []

    def wrap(engine):
        engines.append(ScriptedAnswers(engine, script))
        return engines[0]
    return running_server(QWEN3, wrap_engine=wrap, **overrides), engines


@pytest.fixture(scope="module")
def thinking(tokenizer):
    server, engines = serve(tokenizer)
    with server as handle:
        yield openai_client(handle), engines[0], handle


def test_a_chat_answer_has_reasoning_content_and_a_clean_content(thinking):
    client, _, _ = thinking
    done = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=64)
    message = done.choices[0].message
    assert message.content == ANSWER and message.model_extra["reasoning_content"] == THOUGHT
    assert done.choices[0].finish_reason == "stop"


def test_a_streamed_chat_sends_the_reasoning_first(thinking):
    client, _, _ = thinking
    chunks = list(client.chat.completions.create(model=MODEL, messages=HI, max_tokens=64,
                                                 stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = [d.model_extra.get("reasoning_content") or "" for d in deltas]
    content = [d.content or "" for d in deltas]
    assert "".join(reasoning) == THOUGHT and "".join(content) == ANSWER
    assert max(i for i, r in enumerate(reasoning) if r) < min(i for i, c in enumerate(content) if c)


@pytest.mark.parametrize("extra", [{"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
                                   {"reasoning_effort": "none"}])
def test_thinking_turned_off_reaches_the_template_and_the_answer_is_not_split(thinking, tokenizer,
                                                                              extra):
    client, engine, _ = thinking
    done = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=64, **extra)
    prompt = tokenizer.decode(list(engine.requests[-1].prompt))
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    message = done.choices[0].message
    assert message.content == SCRIPT_TEXT and "reasoning_content" not in message.model_extra


def test_json_mode_is_constrained_after_the_thinking(thinking):
    client, engine, _ = thinking
    done = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=64,
                                          response_format={"type": "json_object"})
    assert json.loads(done.choices[0].message.content) == {"greeting": "hello"}
    assert "ThinkPrefix(open='<think>', close='</think>', starts_inside=False)" in \
        engine.requests[-1].grammar.key                  # the engine's grammar lets it think


def test_history_reasoning_content_is_rendered_for_the_template(thinking, tokenizer):
    client, engine, _ = thinking
    client.chat.completions.create(model=MODEL, max_tokens=8, messages=[
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": "earlier thought"}])
    prompt = tokenizer.decode(list(engine.requests[-1].prompt))
    assert "<|im_start|>assistant\n<think>\nearlier thought\n</think>\n\na<|im_end|>" in prompt


def test_bad_thinking_fields_are_400(thinking):
    client, _, _ = thinking
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=HI,
                                       extra_body={"chat_template_kwargs": ["x"]})
    assert caught.value.body["param"] == "chat_template_kwargs"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=HI, reasoning_effort="max")
    assert caught.value.body["param"] == "reasoning_effort"


def test_the_responses_api_returns_a_reasoning_item_first(thinking):
    client, _, _ = thinking
    response = client.responses.create(model=MODEL, input="hi", max_output_tokens=64)
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and [c.text for c in reasoning.content] == [THOUGHT]
    assert message.type == "message" and response.output_text == ANSWER
    events = list(client.responses.create(model=MODEL, input="hi", max_output_tokens=64,
                                          stream=True))
    text = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert text == THOUGHT
    follow_up = client.responses.create(model=MODEL, max_output_tokens=8, input=[
        {"role": "user", "content": "hi"}, *[item.model_dump(exclude_none=True)
                                             for item in response.output],
        {"role": "user", "content": "more"}])
    assert follow_up.status == "completed"               # the reasoning item is accepted back


def test_the_switch_off_serves_the_text_as_generated(tokenizer):
    server, _ = serve(tokenizer, reasoning="off")
    with server as handle:
        done = openai_client(handle).chat.completions.create(model=MODEL, messages=HI, max_tokens=64)
    message = done.choices[0].message
    assert message.content == SCRIPT_TEXT and "reasoning_content" not in message.model_extra


def test_tokenize_renders_with_the_same_template_variables(thinking, tokenizer):
    _, _, handle = thinking
    url = handle.http_url + "/v1/tokenize"

    def count(**fields) -> int:
        answer = requests.post(url, json={"model": MODEL, "messages": HI, **fields}, timeout=30)
        assert answer.status_code == 200
        return answer.json()["count"]
    closed = len(tokenizer.encode("<think>\n\n</think>\n\n"))
    assert count(chat_template_kwargs={"enable_thinking": False}) == count() + closed
    assert count(reasoning_effort="none") == count() + closed
