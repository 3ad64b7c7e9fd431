"""Every case of the Hugging Face oracle renders byte for byte (or raises its message)."""

import pytest

from template import TemplateRaised, TemplateRuntimeError
from tests.oracle import read_jsonl
from tests.template.oracle_render import assert_renders_like_oracle, render_case

CASES = read_jsonl("template_cases.jsonl")
# The oracle's error types: the template's own raise_exception, or a Python error in rendering.
ERROR_CLASSES = {"jinja2.exceptions.TemplateError": TemplateRaised, "builtins.TypeError": TemplateRuntimeError}


def _render(case: dict) -> str:
    return render_case(case, **case["template_vars"])


def test_oracle_has_all_cases():
    assert len(CASES) == 292
    assert len({case["template_name"] for case in CASES}) == 11


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c['template_name']}-{c['case']}" for i, c in enumerate(CASES)])
def test_oracle_case_renders_exactly(case):
    assert_renders_like_oracle(case, ERROR_CLASSES, **case["template_vars"])


def test_raise_exception_is_distinct_from_runtime_errors():
    gemma = next(c for c in CASES if c["error"] and c["error"]["type"].startswith("jinja2"))
    with pytest.raises(TemplateRaised):
        _render(gemma)
    assert not issubclass(TemplateRaised, TemplateRuntimeError)
