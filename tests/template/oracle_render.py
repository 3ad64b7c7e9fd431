"""One oracle template case rendered and compared, shared by the smol and the families' tests.

A case carries `template_source`, `messages`, `add_generation_prompt`, `tools`, `frozen_now`,
and either `rendered` (the exact text) or `error` {type, message} (what Jinja raised).
"""

from datetime import datetime
from functools import lru_cache

import pytest

from template import Template


@lru_cache(maxsize=None)
def compiled(source: str) -> Template:
    return Template.parse(source)


def render_case(case: dict, **variables) -> str:
    """`variables`: bos/eos and the extra template variables, named as each oracle file has them."""
    return compiled(case["template_source"]).render_chat(
        case["messages"], add_generation_prompt=case["add_generation_prompt"], tools=case["tools"],
        now=datetime.fromisoformat(case["frozen_now"]), **variables)


def assert_renders_like_oracle(case: dict, error_classes: dict[str, type], **variables) -> None:
    """The exact text, or the error class mapped from the oracle's type with its message."""
    if case["error"] is None:
        assert render_case(case, **variables) == case["rendered"]
        return
    with pytest.raises(error_classes[case["error"]["type"]]) as info:
        render_case(case, **variables)
    assert info.value.message == case["error"]["message"]
