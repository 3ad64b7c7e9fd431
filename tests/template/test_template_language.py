"""The language itself: whitespace control, statements, expressions, filters, tests, scoping.

Expected strings follow Jinja's documented behaviour with trim_blocks and lstrip_blocks on.
"""

import pytest

from template import Template, TemplateRuntimeError, UndefinedValueError


def render(source: str, **context) -> str:
    return Template.parse(source).render(context)


# ---- whitespace control ------------------------------------------------------------------

def test_trim_blocks_removes_newline_after_block_tag():
    assert render("{% if true %}\nyes\n{% endif %}\nend") == "yes\nend"


def test_lstrip_blocks_removes_indent_before_block_tag():
    assert render("a\n    {% if true %}\n    b\n    {% endif %}\nc") == "a\n    b\nc"


def test_lstrip_does_not_apply_to_print_tags_or_text_before_tag_on_line():
    assert render("  {{ 'x' }}\n") == "  x"
    assert render("t  {% if true %}y{% endif %}") == "t  y"


def test_minus_strips_all_whitespace_including_newlines():
    assert render("a  \n\n  {{- 'b' -}}  \n\n  c") == "abc"
    assert render("a\n{%- if true -%}\n  b  \n{%- endif %}") == "ab"


def test_plus_disables_lstrip_and_trim():
    assert render("  {%+ if true %}x{% endif %}") == "  x"
    assert render("{% if true +%}\nx{% endif %}") == "\nx"


def test_comments_are_dropped_and_trimmed():
    assert render("a{# note #}b\n  {# own line #}\nc") == "ab\nc"
    assert render("a {#- x -#} b") == "ab"


def test_one_trailing_newline_is_dropped_and_crlf_normalised():
    assert render("x\n") == "x"
    assert render("x\n\n") == "x\n"
    assert render("a\r\nb") == "a\nb"


def test_raw_block_keeps_tags_verbatim():
    assert render("{% raw %}{{ x }}{% if %}{% endraw %}") == "{{ x }}{% if %}"


def test_tag_like_text_inside_strings_is_not_a_tag_end():
    assert render("{{ '}}' ~ '%}' }}{% if '%}' %}ok{% endif %}") == "}}%}ok"


# ---- loops ---------------------------------------------------------------------------------

def test_loop_variables():
    source = ("{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
              "{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }};{% endfor %}")
    assert render(source, items="ab") == "1021102;2110012;"


def test_loop_previtem_nextitem_cycle():
    source = "{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}{{ loop.cycle('a', 'b') }} {% endfor %}"
    assert render(source) == "<1>2a 1<2>3b 2<3>a "


def test_loop_filter_else_and_unpacking():
    assert render("{% for x in [1, 5, 2, 7] if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %}") == "5/3 2/3 7/3 "
    assert render("{% for x in [] %}a{% else %}empty{% endfor %}") == "empty"
    assert render("{% for k, v in d|dictsort %}{{ k }}={{ v }};{% endfor %}", d={"b": 2, "a": 1}) == "a=1;b=2;"


def test_break_and_continue():
    assert render("{% for x in [1,2,3,4] %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}") == "12"
    assert render("{% for x in [1,2,3,4] %}{% if x is even %}{% continue %}{% endif %}{{ x }}{% endfor %}") == "13"


def test_set_inside_loop_does_not_leak_but_namespace_does():
    source = ("{% set total = 0 %}{% set ns = namespace(total=0) %}{% for x in [1, 2, 3] %}"
              "{% set total = total + x %}{% set ns.total = ns.total + x %}{% endfor %}{{ total }} {{ ns.total }}")
    assert render(source) == "0 6"


def test_each_loop_iteration_starts_from_outer_scope():
    source = "{% for x in [1, 2] %}{% if loop.first %}{% set y = 'set' %}{% endif %}[{{ y }}]{% endfor %}"
    assert render(source) == "[set][]"


# ---- assignments, macros, blocks ----------------------------------------------------------

def test_set_forms():
    assert render("{% set a, b = 1, 2 %}{{ a + b }}") == "3"
    assert render("{% set x %} hi {{ 1 }} {% endset %}[{{ x }}]") == "[ hi 1 ]"
    assert render("{% set x | upper | trim %} hi {% endset %}[{{ x }}]") == "[HI]"
    assert render("{% if true %}{% set x = 5 %}{% endif %}{{ x }}") == "5"


def test_macros_defaults_keywords_and_recursion():
    source = ("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}"
              "{{ greet('A') }} {{ greet('B', greeting='Hi') }} {{ greet(name='C') }}")
    assert render(source) == "Hello, A! Hi, B! Hello, C!"
    assert render("{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(3) }}") == "321"


def test_macro_sees_variables_set_later_at_top_level():
    assert render("{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}") == "3"


def test_filter_block_with_and_generation():
    assert render("{% filter upper %}ab{{ 'c' }}{% endfilter %}") == "ABC"
    assert render("{% with a = 5 %}{{ a }}{% endwith %}[{{ a }}]") == "5[]"
    assert render("{% generation %}kept{% endgeneration %}") == "kept"


def test_if_elif_else():
    source = "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}"
    assert render(source) == "one two many "


# ---- expressions ---------------------------------------------------------------------------

@pytest.mark.parametrize("source, expected", [
    ("{{ 1 + 2 * 3 }}", "7"), ("{{ (1 + 2) * 3 }}", "9"), ("{{ 7 / 2 }}", "3.5"), ("{{ 7 // 2 }}", "3"),
    ("{{ 7 % 3 }}", "1"), ("{{ 2 ** 3 ** 2 }}", "64"), ("{{ -2 ** 2 }}", "4"), ("{{ 'a' ~ 1 ~ none }}", "a1None"),
    ("{{ 1 < 2 < 3 }}", "True"), ("{{ 3 > 2 > 5 }}", "False"), ("{{ 'b' in 'abc' }}", "True"),
    ("{{ 'z' not in ['a'] }}", "True"), ("{{ not true or true and false }}", "False"),
    ("{{ 0 or 'z' }}", "z"), ("{{ 'y' if 1 > 2 else 'n' }}", "n"), ("{{ 'y' if false }}", ""),
    ("{{ true }} {{ True }} {{ none }} {{ None }} {{ false }}", "True True None None False"),
    ("{{ [1, 'a', none] }}", "[1, 'a', None]"), ("{{ {'a': (1, 2)} }}", "{'a': (1, 2)}"),
    ("{{ 'it\\'s' }} {{ \"a\\tb\" }} {{ 'x' 'y' }}", "it's a\tb xy"), ("{{ 1_000 }} {{ 1e3 }}", "1000 1000.0"),
    ("{{ 'abc'[::-1] }} {{ 'abc'[1:] }} {{ [1, 2, 3][-1] }} {{ [1, 2, 3][:2] }}", "cba bc 3 [1, 2]"),
    ("{{ -1 | abs }}", "1"), ("{{ 'x' * 3 }}", "xxx"), ("{{ [1] + [2] }}", "[1, 2]"),
])
def test_expression(source, expected):
    assert render(source) == expected


def test_attribute_and_item_access():
    d = {"a": {"b": [10, 20]}, "items": "key"}
    assert render("{{ d.a.b[1] }} {{ d['a']['b'].0 }} {{ d['items'] }}", d=d) == "20 10 key"


def test_string_dict_and_list_methods():
    source = ("{{ s.strip().split(',') }} {{ s.startswith(' a') }} {{ s.replace(',', ';') }} {{ s.find('b') }} "
              "{{ 'x{}y'.format(1) }} {{ d.get('k') }} {{ d.get('zz', 0) }} {{ d.keys() | list }} {{ [1, 2, 1].count(1) }}")
    assert render(source, s=" a,b ", d={"k": 1}) == "['a', 'b'] True  a;b  3 x1y 1 0 ['k'] 2"


# ---- filters and tests ---------------------------------------------------------------------

@pytest.mark.parametrize("source, expected", [
    ("{{ '  a  ' | trim }}|{{ 'xxaxx' | trim('x') }}", "a|a"),
    ("{{ 'ab' | length }} {{ [1, 2] | count }}", "2 2"),
    ("{{ x | default('d') }} {{ '' | default('e', true) }} {{ none | d('n') }}", "d e None"),
    ("{{ 'hello world-x' | title }} {{ 'hELLO' | capitalize }} {{ 'a' | upper }}{{ 'B' | lower }}", "Hello World-X Hello Ab"),
    ("{{ [1, 2, 3] | join(', ') }} {{ [3, 1, 2] | first }} {{ [3, 1, 2] | last }}", "1, 2, 3 3 2"),
    ("{{ 'ab' | list }} {{ 12 | string + 'x' }} {{ '3' | int + 1 }} {{ 'q' | int }} {{ '2.5' | float }}", "['a', 'b'] 12x 4 0 2.5"),
    ("{{ 'aaa' | replace('a', 'b', 2) }} {{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }}", "bba [1, 2, 3] [3, 2, 1]"),
    ("{{ [1, 2, 1] | unique | list }} {{ [1, 2] | reverse | list }} {{ 'ab' | reverse }}", "[1, 2] [2, 1] ba"),
    ("{{ 2.567 | round(2) }} {{ 2.5 | round }} {{ [1, 2, 3] | sum }} {{ [4, 9, 2] | max }} {{ [4, 9, 2] | min }}", "2.57 2.0 6 9 2"),
    ("{{ 'a\nb' | indent(2) }}|{{ 'a\n\nb' | indent(2, true, true) }}", "a\n  b|  a\n  \n  b"),
    ("{{ 'one two three' | wordcount }} {{ [1, 2, 3] | batch(2) | list }} {{ 'x' | safe }}", "3 [[1, 2], [3]] x"),
    ("{{ {'b': 1, 'a': 2} | dictsort }} {{ {'a': 1} | items | list }}", "[('a', 2), ('b', 1)] [('a', 1)]"),
    ("{{ ['a', 'B'] | map('upper') | list }} {{ [1, 2, 3] | select('odd') | list }} {{ [1, 2, 3] | reject('odd') | list }}",
     "['A', 'B'] [1, 3] [2]"),
])
def test_filter(source, expected):
    assert render(source) == expected


def test_attribute_filters():
    people = [{"name": "b", "age": 3}, {"name": "A", "age": 1}]
    assert render("{{ p | map(attribute='name') | join(',') }}", p=people) == "b,A"
    assert render("{{ p | selectattr('age', 'gt', 1) | map(attribute='name') | list }}", p=people) == "['b']"
    assert render("{{ p | rejectattr('age', 'equalto', 1) | length }}", p=people) == "1"
    assert render("{{ p | sort(attribute='name') | map(attribute='name') | join }}", p=people) == "Ab"
    assert render("{{ p | selectattr('name', 'equalto', 'A') | list | length }}", p=people) == "1"


def test_tojson_is_unescaped_and_takes_options():
    d = {"b": "é<>&'", "a": [1, 2]}
    assert render("{{ d | tojson }}", d=d) == '{"b": "é<>&\'", "a": [1, 2]}'
    assert render("{{ d | tojson(indent=2, sort_keys=true) }}", d={"b": 1, "a": None}) == '{\n  "a": null,\n  "b": 1\n}'
    assert render("{{ d | tojson(separators=(',', ':')) }}", d={"a": [1, 2]}) == '{"a":[1,2]}'


def test_tests():
    source = ("{{ 's' is string }}{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.0 is float }}"
              "{{ {} is mapping }}{{ [] is sequence }}{{ 'x' is iterable }}{{ 1 is iterable }}{{ true is boolean }}"
              "{{ none is none }}{{ 2 is even }}{{ 'a' is in 'abc' }}{{ 'ab' is lower }}{{ 1 is sameas 1 }}"
              "{{ 'u' is equalto 'u' }}{{ 1 is ne 1 }}{{ x is undefined }}{{ range is callable }}{{ false is false }}")
    expected = "TrueTrueTrueFalseTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrue"
    assert render(source) == expected


# ---- undefined semantics -------------------------------------------------------------------

def test_undefined_prints_empty_is_false_and_iterates_empty():
    assert render("[{{ x }}][{{ d.missing }}][{{ d['missing'] }}]{% if not x %}F{% endif %}{% for i in x %}i{% endfor %}",
                  d={}) == "[][][]F"
    assert render("{{ x is defined }} {{ d.k is defined }} {{ x | length }} {{ x | default(1) }}", d={"k": 0}) == "False True 0 1"


def test_undefined_attribute_of_undefined_names_the_missing_thing():
    with pytest.raises(UndefinedValueError) as info:
        render("{{ x.y }}")
    assert info.value.message == "'x' is undefined"
    with pytest.raises(UndefinedValueError) as info:
        render("{{ d.first.second }}", d={})
    assert info.value.message == "'dict object' has no attribute 'first'"


def test_arithmetic_on_undefined_raises():
    with pytest.raises(TemplateRuntimeError) as info:
        render("{{ 'a' + missing }}")
    assert info.value.message == "'missing' is undefined"


def test_python_type_errors_become_runtime_errors_with_line():
    with pytest.raises(TemplateRuntimeError) as info:
        render("line one\n{{ 'a' + 1 }}")
    assert info.value.message == 'can only concatenate str (not "int") to str'
    assert info.value.lineno == 2
    with pytest.raises(TemplateRuntimeError) as info:
        render("{% for t in tools %}{% endfor %}", tools=None)
    assert info.value.message == "'NoneType' object is not iterable"


def test_break_and_continue_keep_nothing_alive_after_a_render():
    """{% break %} / {% continue %} once raised one shared exception instance, whose
    __traceback__ grew by every raise and kept each render's frames and output alive."""
    import gc
    import tracemalloc
    source = ("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
              "{% for c in 'ab' %}{% continue %}{% endfor %}{{ m.content | upper }}{% endfor %}")
    template = Template.parse(source)
    messages = [{"content": "x" * 100_000}, {"content": "y"}]
    template.render({"messages": messages})                 # warm up caches
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(40):
        assert template.render({"messages": messages}) == "X" * 100_000   # a new string each time
    gc.collect()
    grown_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown_bytes < 1_000_000, f"{grown_bytes} bytes stayed alive after 40 renders"
