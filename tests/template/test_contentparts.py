"""Which templates loop over a message's content parts: read from the syntax tree."""
from __future__ import annotations

import pytest

from template import Template
from tests.oracle import read_jsonl

# Qwen2-VL / Llama-3.2-Vision style: the template walks the parts itself.
PARTS_TEMPLATE = ("{% for message in messages %}<{{ message['role'] }}>"
                  "{% for part in message['content'] %}{% if part['type'] == 'text' %}"
                  "[{{ part['text'] }}]{% endif %}{% endfor %}{% endfor %}")


@pytest.mark.parametrize("source", [
    PARTS_TEMPLATE,
    "{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
    "{% for m in messages %}{% set c = m['content'] %}{% for p in c %}{{ p.text }}"
    "{% endfor %}{% endfor %}",
    "{% if x %}{% for p in messages[0].content if p.type == 'text' %}{{ p.text }}"
    "{% endfor %}{% endif %}",
])
def test_templates_that_loop_over_content_are_detected(source):
    assert Template.parse(source).iterates_content_parts


@pytest.mark.parametrize("source", [
    "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    "{% for m in messages %}{% for t in m.tool_calls %}{{ t }}{% endfor %}{% endfor %}",
    "{% set content = 'x' %}{% for c in contents %}{{ c }}{% endfor %}",
])
def test_templates_that_print_content_are_not(source):
    assert not Template.parse(source).iterates_content_parts


def test_no_oracle_family_loops_over_parts():
    """The oracle's families all print `content` as a string (so the server joins parts)."""
    sources = {case["template_name"]: case["template_source"]
               for case in read_jsonl("template_cases.jsonl")}
    assert len(sources) >= 10
    assert [name for name, src in sources.items()
            if Template.parse(src).iterates_content_parts] == []


def test_a_parts_template_renders_the_parts_as_given():
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"},
                                             {"type": "text", "text": "b"}]}]
    assert Template.parse(PARTS_TEMPLATE).render_chat(messages) == "<user>[a][b]"
