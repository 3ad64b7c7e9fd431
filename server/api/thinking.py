"""Thinking at the API edge: the request fields that reach a thinking chat template, and the
grammar that lets the model think before its constrained answer.

    chat_template_kwargs: {name: JSON value}    further variables of the chat template
                                                (vLLM's field), e.g. {"enable_thinking": false}
    reasoning_effort: none|minimal|low|medium|high   (chat; the Responses API's
                                                `reasoning.effort`) reaches the template as
                                                `reasoning_effort`; "none" also sets
                                                `enable_thinking` false (Qwen3's switch)

`chat_template_kwargs` wins over what `reasoning_effort` sets. Whether the answer is split
is the text layer's rule (server/text/reasoning.py `request_thinking`), read from the
rendered prompt; `after_thinking` then moves a request's grammar (JSON mode, a schema, tool
calls) behind the reasoning (engine/grammar/thinking.py): the model thinks freely, and its
answer is constrained from the first character after `</think>`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.api import ThinkPrefix
from server.api.structured import Structured
from server.errors import bad
from server.text.reasoning import ENABLE_THINKING, Thinking

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
EFFORT_OFF = "none"
EFFORT_VARIABLE = "reasoning_effort"


def reasoning_effort(value: Any, param: str) -> str | None:
    if value is None or value in REASONING_EFFORTS:
        return value
    raise bad(param, f"{value!r} is not a valid '{param}'; expected one of "
                     f"{', '.join(REASONING_EFFORTS)}.")


def template_variables(doc: dict, effort: str | None = None) -> tuple[tuple[str, Any], ...]:
    """`chat_template_kwargs` and the reasoning effort (chat's `reasoning_effort` unless the
    caller read it elsewhere) -> the template's further names, in order."""
    if effort is None:
        effort = reasoning_effort(doc.get("reasoning_effort"), "reasoning_effort")
    kwargs = doc.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise bad("chat_template_kwargs", "'chat_template_kwargs' must be an object of "
                                          "template variables.")
    variables: dict[str, Any] = {}
    if effort is not None:
        variables[EFFORT_VARIABLE] = effort
        if effort == EFFORT_OFF:
            variables[ENABLE_THINKING] = False
    variables.update(kwargs or {})
    return tuple(variables.items())


def after_thinking(structured: Structured | None, thinking: Thinking | None) -> Structured | None:
    """The request's grammar, applied after the model's reasoning when its answer is split."""
    if structured is None or thinking is None:
        return structured
    think = ThinkPrefix(thinking.tags.open, thinking.tags.close, thinking.starts_inside)
    return replace(structured, spec=replace(structured.spec, think=think))
