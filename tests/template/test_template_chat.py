"""Chat rendering: the worked example by hand, the default template, HF message prep."""

from datetime import datetime

import pytest

from template import DEFAULT_TEMPLATE, Template, TemplateRaised
from tests.oracle import HF_DIR

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SMOL_SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


def test_chat_template_hand_example():
    prompt = Template.parse(SMOLLM2).render_chat([{"role": "user", "content": "Hi"}])
    assert prompt == SMOL_SYSTEM + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_hand_example_system_first_gets_no_default_system_turn():
    prompt = Template.parse(SMOLLM2).render_chat(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert prompt == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"


def test_hand_example_default_system_turn_only_before_first_message():
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    prompt = Template.parse(SMOLLM2).render_chat(messages)
    assert prompt.count("<|im_start|>system") == 1
    assert prompt.startswith(SMOL_SYSTEM + "<|im_start|>user\na")


def test_hand_example_filters_elif_loop_last_whitespace():
    source = (
        "{%- for m in messages %}\n"
        "    {%- if m.role == 'system' %}[S:{{ m.content | trim | upper }}]\n"
        "    {%- elif m.role == 'user' %}[U:{{ m.content | length }}]\n"
        "    {%- else %}[A:{{ m.content | title }}]\n"
        "    {%- endif %}\n"
        "    {%- if not loop.last %},{% endif %}\n"
        "{%- endfor %}"
    )
    messages = [{"role": "system", "content": " be brief "}, {"role": "user", "content": "four"},
                {"role": "assistant", "content": "ok then"}]
    assert Template.parse(source).render_chat(messages) == "[S:BE BRIEF],[U:4],[A:Ok Then]"


def test_default_template():
    template = Template.parse(DEFAULT_TEMPLATE)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]
    assert template.render_chat(messages) == "<|system|>\nS\n<|user|>\nHi\n<|assistant|>\n"
    assert template.render_chat(messages, add_generation_prompt=False) == "<|system|>\nS\n<|user|>\nHi\n"


def test_render_messages_takes_role_content_pairs():
    template = Template.parse(DEFAULT_TEMPLATE)
    assert template.render_messages([("user", "x")], True, "", "") == "<|user|>\nx\n<|assistant|>\n"
    assert template.render_messages([("user", "x")], False, "", "") == "<|user|>\nx\n"


def test_render_chat_passes_bos_eos_tools_and_extra():
    source = "{{ bos_token }}|{{ eos_token }}|{{ tools | length }}|{{ flag }}|{{ documents is none }}"
    text = Template.parse(source).render_chat([], bos_token="<s>", eos_token="</s>", tools=[{"a": 1}], flag=7)
    assert text == "<s>|</s>|1|7|True"


def test_render_chat_drops_none_valued_message_keys():
    source = "{% for m in messages %}{{ m.content is defined }} {{ 'tool_calls' in m }}{% endfor %}"
    text = Template.parse(source).render_chat([{"role": "assistant", "content": None, "tool_calls": None}])
    assert text == "False False"


@pytest.mark.parametrize("key", ["reasoning_content", "thinking", "reasoning"])
def test_render_chat_mirrors_reasoning_keys(key):
    source = "{% for m in messages %}{{ m.reasoning_content }}/{{ m.thinking }}/{{ m.reasoning }}{% endfor %}"
    text = Template.parse(source).render_chat([{"role": "assistant", "content": "4", key: "why"}])
    assert text == "why/why/why"


def test_render_chat_does_not_flatten_content_parts():
    source = "{% for m in messages %}{{ m.content is string }}{{ m.content | length }}{% endfor %}"
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert Template.parse(source).render_chat([{"role": "user", "content": parts}]) == "False2"


def test_render_chat_does_not_mutate_caller_messages():
    messages = [{"role": "user", "content": "x", "name": None}]
    Template.parse(DEFAULT_TEMPLATE).render_chat(messages)
    assert messages == [{"role": "user", "content": "x", "name": None}]


def test_strftime_now_uses_injected_time():
    text = Template.parse("{{ strftime_now('%d %B %Y') }}").render({}, now=datetime(2024, 7, 26, 12))
    assert text == "26 July 2024"


def test_raise_exception_carries_message_verbatim():
    with pytest.raises(TemplateRaised) as info:
        Template.parse("{{ raise_exception('Roles must alternate: ' ~ 2) }}").render({})
    assert info.value.message == "Roles must alternate: 2"


def test_chat_template_for_falls_back_to_default():
    from template import chat_template_for
    messages = [{"role": "user", "content": "Hi"}]
    assert chat_template_for(None).render_chat(messages) == "<|user|>\nHi\n<|assistant|>\n"
    assert chat_template_for("").render_chat(messages) == "<|user|>\nHi\n<|assistant|>\n"
    assert chat_template_for(SMOLLM2).render_chat(messages).startswith(SMOL_SYSTEM)


def test_served_model_template_renders_hand_example():
    """The served model's template (from the oracle's HF export) parses and renders the hand example."""
    source = (HF_DIR / "chat_template.jinja").read_text(encoding="utf-8")
    prompt = Template.parse(source).render_chat([{"role": "user", "content": "Hi"}])
    assert prompt == SMOL_SYSTEM + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_model_render_chat_passes_the_tokenizers_bos_and_eos_strings():
    """ChatFormat (template/template.py) renders with the tokenizer's BOS/EOS strings; a missing
    one (None) renders as ""."""
    from template import ChatFormat
    chat = ChatFormat.from_source("[{{ bos_token }}]{% for m in messages %}{{ m.content }}{% endfor %}"
                                  "{% if add_generation_prompt %}>{% endif %}[{{ eos_token }}]",
                                  bos_token="<s>", eos_token=None)
    messages = ({"role": "user", "content": "hi"},)
    assert chat.render(messages) == "[<s>]hi>[]"
    assert chat.render(messages, add_generation_prompt=False) == "[<s>]hi[]"
