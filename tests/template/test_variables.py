"""template/variables.py: the names a template reads, from its syntax tree."""
from template import Template


def test_names_read_by_variable_attribute_and_key():
    names = Template.parse("{% if tools %}{{ m.tool_calls }}{% endif %}{{ x['content'] }}").names
    assert {"tools", "tool_calls", "content", "m", "x"} <= names
    assert "tools" not in Template.parse("{{ 'tools' }}{% for m in messages %}{{ m.role }}{% endfor %}").names
