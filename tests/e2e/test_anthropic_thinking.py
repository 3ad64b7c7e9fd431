"""Anthropic's `thinking` end to end with the `anthropic` SDK: qwen3-tiny served whole (the
real Qwen3 tokenizer and chat template, random weights), its engine answering with a
scripted thinking answer (tests/fakes.py `ScriptedAnswers`), so the template, the switch it
reads (`enable_thinking`), the text layer's split and the renderers are the real ones."""
from __future__ import annotations

import anthropic
import pytest

from engine.api import load_model
from server.api.messages.render import signature
from tests.e2e.helpers import TIMEOUT_S, running_server
from tests.fakes import ScriptedAnswers
from tests.oracle import ORACLE_DIR

QWEN3 = ORACLE_DIR / "families" / "qwen3-tiny" / "model"
MODEL = "model"                                  # the folder's name is the served id
THOUGHT, ANSWER = "The user greets me.", "Hello!"
SCRIPT_TEXT = f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}"
HI = [{"role": "user", "content": "hi"}]
THINK = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture(scope="module")
def tokenizer():
    return load_model(str(QWEN3)).tokenizer


@pytest.fixture(scope="module")
def served(tokenizer):
    script = tuple(tokenizer.encode(SCRIPT_TEXT)) + (tokenizer.eos_token_ids[0],)
    engines: list[ScriptedAnswers] = []

    def wrap(engine):
        engines.append(ScriptedAnswers(engine, script))
        return engines[0]
    with running_server(QWEN3, wrap_engine=wrap) as handle:
        client = anthropic.Anthropic(base_url=handle.http_url, api_key="unused", max_retries=0,
                                     timeout=TIMEOUT_S)
        yield client, engines[0]


def test_thinking_enabled_is_a_signed_thinking_block_before_the_text(served):
    client, _ = served
    whole = client.messages.create(model=MODEL, max_tokens=2048, messages=HI, thinking=THINK)
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None))
            for b in whole.content] == [("thinking", THOUGHT), ("text", ANSWER)]
    assert whole.content[0].signature == signature(THOUGHT)
    assert whole.stop_reason == "end_turn"
    with client.messages.stream(model=MODEL, max_tokens=2048, messages=HI,
                                thinking=THINK) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert [b.model_dump(exclude={"parsed_output"}) for b in final.content] == \
        [b.model_dump() for b in whole.content]
    assert kinds.index("thinking") < kinds.index("signature") < kinds.index("text")


def test_thinking_absent_or_disabled_turns_the_templates_switch_off(served, tokenizer):
    client, engine = served
    for extra in ({}, {"thinking": {"type": "disabled"}}):
        whole = client.messages.create(model=MODEL, max_tokens=64, messages=HI, **extra)
        prompt = tokenizer.decode(list(engine.requests[-1].prompt))
        assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert [(b.type, b.text) for b in whole.content] == [("text", SCRIPT_TEXT)]


def test_a_thinking_block_sent_back_in_a_tool_loop_is_rendered_for_the_template(served,
                                                                               tokenizer):
    """Qwen3's template renders the thinking of the turns after the last user query: the
    assistant turn of a tool loop, answered by a tool_result."""
    client, engine = served
    client.messages.create(model=MODEL, max_tokens=8, thinking={"type": "adaptive"}, messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "earlier thought", "signature": "not checked"},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "sunny"}]}])
    prompt = tokenizer.decode(list(engine.requests[-1].prompt))
    assert "<|im_start|>assistant\n<think>\nearlier thought\n</think>" in prompt
    assert '"city": "Oslo"' in prompt and "sunny" in prompt
