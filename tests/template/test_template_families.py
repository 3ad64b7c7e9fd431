"""Each model family's own chat template renders the oracle's cases byte for byte.

Oracle: ../shared/oracle/families/<family>/template_cases.jsonl (ten cases a family), what
Hugging Face's `apply_chat_template` gave with the family's template (`template_source`):
system folding and role checks (Gemma 3), tools and tool calls, `enable_thinking` and
`<think>` history (Qwen), the Llama 3 date line. `template_kwargs` are extra variables;
`error` holds what the template raised, which our render must raise with the same text.
"""

import pytest

from template import TemplateRaised
from tests.family_tokens import GEMMA, TINY_FAMILIES, family_jsonl
from tests.template.oracle_render import assert_renders_like_oracle, render_case

FAMILIES = (GEMMA,) + TINY_FAMILIES
CASES_PER_FAMILY = 10
CASES = [(family, case) for family in FAMILIES for case in family_jsonl(family, "template_cases.jsonl")]
# The oracle's error type for the template's own raise_exception (jinja2.exceptions.TemplateError).
ERROR_CLASSES = {"TemplateError": TemplateRaised}


def _variables(case: dict) -> dict:
    return {"bos_token": case["bos_token"], "eos_token": case["eos_token"], **case["template_kwargs"]}


def _render(case: dict) -> str:
    return render_case(case, **_variables(case))


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_has_its_cases(family):
    cases = [case for name, case in CASES if name == family]
    assert len(cases) == CASES_PER_FAMILY
    assert len({case["template_source"] for case in cases}) == 1


@pytest.mark.parametrize("family, case", CASES,
                         ids=[f"{family}-{case['case']}" for family, case in CASES])
def test_family_case_renders_exactly(family, case):
    assert_renders_like_oracle(case, ERROR_CLASSES, **_variables(case))


def test_thinking_switch_reaches_the_qwen3_template():
    """enable_thinking=False must change the prompt (an empty think block), not be ignored."""
    case = next(c for f, c in CASES if f == "qwen3-tiny" and c["template_kwargs"].get("enable_thinking") is False
                and c["add_generation_prompt"])
    with_switch = _render(case)
    without = _render({**case, "template_kwargs": {}})
    assert with_switch == case["rendered"]
    assert with_switch.endswith("<think>\n\n</think>\n\n") and with_switch != without
