"""Predicted outputs (OpenAI's `prediction`, chat and legacy completions): the text the answer
is expected to repeat, typically the file a request asks to rewrite with one change.

    parse_prediction(doc)        {"type": "content", "content": str | [text parts]} -> its text,
                                 None when absent; any other shape is a 400 naming the field
                                 (`prediction`, `prediction.type`, `prediction.content[j]`...)
    prediction_usage(a, r)       usage.completion_tokens_details as OpenAI reports it

A prediction only feeds the engine's speculative drafts (`GenRequest.prediction`, its token
ids: the text tokenized without special-token markup, server/text/served.py): the answer is
token for token the one without it. That is why `n > 1`, `logprobs` and `tools`, which OpenAI
refuses beside a prediction, are accepted here. The Responses API has no `prediction`.
"""
from __future__ import annotations

from typing import Any

from server.errors import bad

PREDICTION_PARAM = "prediction"
PREDICTION_TYPE = "content"     # the one type OpenAI defines
TEXT_PART_TYPE = "text"
PART_JOINER = ""                # parts are pieces of one predicted text: concatenated


def _part_text(where: str, part: Any) -> str:
    if not isinstance(part, dict) or part.get("type") != TEXT_PART_TYPE:
        raise bad(where, f"'{where}' must be a text part {{\"type\": \"text\", \"text\": ...}}.")
    if not isinstance(part.get("text"), str):
        raise bad(f"{where}.text", f"'{where}.text' must be a string.")
    return part["text"]


def _content_text(content: Any) -> str:
    where = f"{PREDICTION_PARAM}.content"
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(where, f"'{where}' must be a string or a list of text parts.")
    return PART_JOINER.join(_part_text(f"{where}[{j}]", part) for j, part in enumerate(content))


def parse_prediction(doc: dict) -> str | None:
    """The request's predicted text, or None when it sent no `prediction` (or null)."""
    v = doc.get(PREDICTION_PARAM)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise bad(PREDICTION_PARAM, f"'{PREDICTION_PARAM}' must be an object "
                                    f"{{\"type\": \"content\", \"content\": ...}}.")
    if v.get("type") != PREDICTION_TYPE:
        raise bad(f"{PREDICTION_PARAM}.type", f"{v.get('type')!r} is not a valid "
                                              f"'{PREDICTION_PARAM}.type'; expected 'content'.")
    return _content_text(v.get("content"))


def prediction_usage(accepted_tokens: int, rejected_tokens: int) -> dict:
    """usage.completion_tokens_details of an answer that had a prediction (summed over its
    choices): drafted prediction tokens the model kept, and those it did not."""
    return {"accepted_prediction_tokens": accepted_tokens,
            "rejected_prediction_tokens": rejected_tokens}
