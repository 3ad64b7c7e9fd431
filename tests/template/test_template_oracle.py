"""Every case of the Hugging Face oracle renders byte for byte (or raises its message)."""

from datetime import datetime
from functools import lru_cache

import pytest

from template import Template, TemplateRaised, TemplateRuntimeError
from tests.oracle import read_jsonl

CASES = read_jsonl("template_cases.jsonl")
# The oracle's error types: the template's own raise_exception, or a Python error in rendering.
ERROR_CLASSES = {"jinja2.exceptions.TemplateError": TemplateRaised, "builtins.TypeError": TemplateRuntimeError}


@lru_cache(maxsize=None)
def _compiled(source: str) -> Template:
    return Template.parse(source)


def _render(case: dict) -> str:
    return _compiled(case["template_source"]).render_chat(
        case["messages"], add_generation_prompt=case["add_generation_prompt"], tools=case["tools"],
        now=datetime.fromisoformat(case["frozen_now"]), **case["template_vars"])


def test_oracle_has_all_cases():
    assert len(CASES) == 292
    assert len({case["template_name"] for case in CASES}) == 11


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c['template_name']}-{c['case']}" for i, c in enumerate(CASES)])
def test_oracle_case_renders_exactly(case):
    if case["error"] is None:
        assert _render(case) == case["rendered"]
        return
    with pytest.raises(ERROR_CLASSES[case["error"]["type"]]) as info:
        _render(case)
    assert info.value.message == case["error"]["message"]


def test_raise_exception_is_distinct_from_runtime_errors():
    gemma = next(c for c in CASES if c["error"] and c["error"]["type"].startswith("jinja2"))
    with pytest.raises(TemplateRaised):
        _render(gemma)
    assert not issubclass(TemplateRaised, TemplateRuntimeError)
