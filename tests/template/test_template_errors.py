"""Syntax errors at parse time (with line and column) and the sandbox's limits."""

import pytest

from template import (Limits, Template, TemplateLimitError, TemplateSecurityError, TemplateSyntaxError)


@pytest.mark.parametrize("source, message, lineno, col", [
    ("{% for x in y %}\n  {% endif %}", "Encountered unknown tag 'endif'. Jinja was looking for the following tags: "
     "'endfor' or 'else'. The innermost block that needs to be closed is 'for'.", 2, 6),
    ("{% if a %}\n{% for x in y %}", "Unexpected end of template. Jinja was looking for the following tags: "
     "'endfor' or 'else'. The innermost block that needs to be closed is 'for'.", 2, 17),
    ("{% if a %}{% for x in y %}{% endif %}", "Encountered unknown tag 'endif'. You probably made a nesting mistake. "
     "Jinja is expecting this tag, but currently looking for 'endfor' or 'else'. The innermost block that needs "
     "to be closed is 'for'.", 1, 30),
    ("ok\n{% include 'x' %}", "Encountered unknown tag 'include'.", 2, 4),
    ("{{ x | nosuchfilter }}", "No filter named 'nosuchfilter'.", 1, 8),
    ("{{ x is nosuchtest }}", "No test named 'nosuchtest'.", 1, 9),
    ("{{ 1 + }}", "unexpected 'end of print statement'", 1, 8),
    ("{{ x y }}", "expected token 'end of print statement', got 'y'", 1, 6),
    ("{{ (1 }}", "unexpected '}', expected ')'", 1, 7),
    ("{# open", "Missing end of comment tag", 1, 1),
    ("a\n{{ 'open }}", "unexpected char \"'\" at 5", 2, 4),
    ("{% if x %}a{% else %}b{% else %}c{% endif %}", "Encountered unknown tag 'else'. Jinja was looking for the "
     "following tags: 'endif'. The innermost block that needs to be closed is 'if'.", 1, 26),
    ("{% macro m(a=1, b) %}{% endmacro %}", "non-default argument follows default argument", 1, 18),
])
def test_template_errors_are_caught_at_parse(source, message, lineno, col):
    with pytest.raises(TemplateSyntaxError) as info:
        Template.parse(source)
    assert (info.value.message, info.value.lineno, info.value.col) == (message, lineno, col)


def test_syntax_error_str_names_line_and_column():
    with pytest.raises(TemplateSyntaxError) as info:
        Template.parse("{% frobnicate %}")
    assert str(info.value) == "Encountered unknown tag 'frobnicate'. (line 1, column 4)"


def test_deeply_nested_expression_is_a_syntax_error_not_a_crash():
    with pytest.raises(TemplateSyntaxError):
        Template.parse("{{ " + "(" * 500 + "1" + ")" * 500 + " }}")


@pytest.mark.parametrize("source", ["{{ x.__class__ }}", "{{ ''.__class__ }}", "{{ d._private }}"])
def test_private_attributes_are_refused(source):
    with pytest.raises(TemplateSecurityError):
        Template.parse(source).render({"x": 1, "d": {}})


def test_mutating_list_methods_are_refused():
    with pytest.raises(TemplateSecurityError):
        Template.parse("{{ xs.append(1) }}").render({"xs": []})


def test_format_with_attribute_lookup_is_refused():
    with pytest.raises(TemplateSecurityError):
        Template.parse("{{ '{0.__class__}'.format(1) }}").render({})


def test_loop_iteration_limit():
    template = Template.parse("{% for i in range(50) %}{% for j in range(50) %}{% endfor %}{% endfor %}",
                              limits=Limits(max_loop_iterations=1000))
    with pytest.raises(TemplateLimitError) as info:
        template.render({})
    assert "max_loop_iterations" in info.value.message


def test_loop_iteration_limit_counts_items_a_loop_filter_drops():
    template = Template.parse("{% for i in range(50) %}{% for j in range(50) if false %}{% endfor %}"
                              "{% endfor %}ok", limits=Limits(max_loop_iterations=1000))
    with pytest.raises(TemplateLimitError) as info:
        template.render({})
    assert "max_loop_iterations" in info.value.message


def test_macro_recursion_limit():
    template = Template.parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
    with pytest.raises(TemplateLimitError) as info:
        template.render({})
    assert "max_call_depth" in info.value.message


def test_output_size_limit():
    template = Template.parse("{% for i in range(100) %}{{ 'x' * 100 }}{% endfor %}", limits=Limits(max_output_chars=5000))
    with pytest.raises(TemplateLimitError) as info:
        template.render({})
    assert "max_output_chars" in info.value.message


def test_range_limit():
    with pytest.raises(TemplateLimitError) as info:
        Template.parse("{{ range(10 ** 9) | length }}").render({})
    assert "max_range_items" in info.value.message


def test_huge_power_is_refused():
    with pytest.raises(TemplateLimitError):
        Template.parse("{{ 2 ** 100000 }}").render({})


def test_parse_once_render_many_without_state_leaking():
    template = Template.parse("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}")
    assert template.render({"xs": [1, 2]}) == "3"
    assert template.render({"xs": [5]}) == "5"


def test_doubling_a_string_in_a_loop_hits_the_size_limit():
    source = "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}"
    with pytest.raises(TemplateLimitError) as info:
        Template.parse(source, limits=Limits(max_output_chars=100_000)).render({})
    assert "max_output_chars" in info.value.message
