"""Which served templates think, and how a request's answer is split: the real Qwen3 template
(qwen3-tiny: random weights, the real tokenizer and template) with `enable_thinking` and a
history's `reasoning_content`, a DeepSeek-R1-style template that opens the tag itself, and
the `[engine].reasoning = "off"` switch."""
from __future__ import annotations

import pytest

from engine.api import load_model
from server.text.messages import Message
from server.text.reasoning import Thinking, request_thinking, template_thinks
from server.text.served import ServedModel
from tests.oracle import ORACLE_DIR

QWEN3 = ORACLE_DIR / "families" / "qwen3-tiny" / "model"
# The generation prompt of DeepSeek-R1's template: the assistant turn opens the thinking.
R1_STYLE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
            "{% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}")
PLAIN = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
HI = (Message("user", "hi"),)


@pytest.fixture(scope="module")
def qwen3():
    return load_model(str(QWEN3))


def test_templates_that_think_are_read_from_their_text(qwen3):
    assert template_thinks(qwen3.chat_template) and template_thinks(R1_STYLE)
    assert not template_thinks(PLAIN)
    assert ServedModel(qwen3, "q", 4096).thinks
    assert not ServedModel(qwen3, "q", 4096, reasoning=False).thinks      # the switch
    assert not ServedModel(qwen3, "q", 4096, chat_template=PLAIN).thinks


def test_qwen3_thinks_unless_the_request_turns_it_off(qwen3):
    served = ServedModel(qwen3, "q", 4096)
    on = served.render(HI)
    assert on.endswith("<|im_start|>assistant\n")
    assert served.thinking_for(on, {}) == Thinking()
    off_vars = {"enable_thinking": False}
    off = served.render(HI, variables=off_vars)
    assert off == on + "<think>\n\n</think>\n\n"          # the template closed the thinking
    assert served.thinking_for(off, off_vars) is None


def test_a_template_that_opens_the_tag_starts_inside_whatever_the_request_says(qwen3):
    served = ServedModel(qwen3, "r1", 4096, chat_template=R1_STYLE)
    prompt = served.render(HI, variables={"enable_thinking": False})
    assert prompt.endswith("<think>\n")
    assert served.thinking_for(prompt, {"enable_thinking": False}) == Thinking(starts_inside=True)


def test_without_a_thinking_template_nothing_is_split(qwen3):
    served = ServedModel(qwen3, "p", 4096, chat_template=PLAIN)
    assert served.thinking_for(served.render(HI), {}) is None
    assert request_thinking(False, "<think>", {}) is None


def test_history_reasoning_content_renders_inside_the_think_tags(qwen3):
    served = ServedModel(qwen3, "q", 4096)
    turns = (Message("user", "q"), Message("assistant", "a", reasoning_content="\nr\n"))
    assert served.render(turns, add_generation_prompt=False) == (
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n")


def test_template_variables_never_replace_the_servers_own(qwen3):
    served = ServedModel(qwen3, "q", 4096)
    assert served.render(HI, variables={"messages": [], "add_generation_prompt": False,
                                        "tools": "x", "now": 1}) == served.render(HI)
