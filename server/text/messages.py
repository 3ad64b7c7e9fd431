"""Chat messages, typed once: `Message` values from the request JSON, plain values at the
template boundary only.

1. `check_content(where, content)` (validation, called by the API's parsers): `content` is a
   string or a list of parts. A `text` part is `{"type": "text", "text": str}`; an image,
   audio or file part is a 422 naming `messages[i].content[j].type` (this server serves
   text models); any other part is a 400. Every role may send parts. Parts become `TextPart`s.
2. The parsers (server/api/chat/request.py, server/api/responses/parse.py) build frozen
   `Message`s, and nothing copies them on the way to the template.
3. `for_template(messages, iterates_parts)` is the one conversion to the plain values the
   Jinja template reads (server/text/served.py calls it): the `developer` role becomes
   `system` (OpenAI's name for the system instruction; the templates know no `developer`
   turn), and a list of parts becomes its text joined with "\n" (as vLLM does), unless the
   template loops over the parts itself (template/contentparts.py): then it gets them as
   `{"type": "text", "text": ...}` dicts, which is what Hugging Face's `apply_chat_template`
   hands it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.errors import ApiError, bad

TEXT_PART = "text"
# Part types of real OpenAI-style clients that need a modality this server has not got.
MEDIA_PARTS = frozenset({"image_url", "input_image", "image", "input_audio", "audio",
                         "file", "input_file", "video", "video_url"})
PART_JOINER = "\n"
ROLE_ALIASES = {"developer": "system"}


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ToolCall:
    """A call of an assistant turn in the history; `arguments` parsed (templates read the
    object, as vLLM hands it)."""
    name: str
    arguments: dict
    id: str | None = None


Content = str | tuple[TextPart, ...]


@dataclass(frozen=True)
class Message:
    """One turn of a conversation. `tool_calls` is None when the turn sent none (an empty
    tuple when it sent `[]`); `reasoning_content` is an earlier answer's thinking, sent back
    (Qwen3's template renders it inside `<think>`); `extra` keeps any other field the client
    sent, in its order, for templates that read it."""
    role: str
    content: Content = ""
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    reasoning_content: str | None = None


def check_part(where: str, part: Any, text_types: tuple[str, ...] = (TEXT_PART,)) -> TextPart:
    """One content part -> its text (the part's type one of `text_types`), or the 400/422
    naming it."""
    if not isinstance(part, dict):
        raise bad(where, f"'{where}' must be an object with 'type' and 'text'.")
    kind = part.get("type")
    if kind in MEDIA_PARTS:
        raise ApiError("unsupported_parameter", f"Content parts of type {kind!r} are not "
                       "supported: this model reads text only.", param=f"{where}.type")
    if kind not in text_types:
        expected = " or ".join(repr(t) for t in text_types)
        raise bad(f"{where}.type", f"{kind!r} is not a valid content part type; expected "
                                   f"{expected}.")
    if not isinstance(part.get("text"), str):
        raise bad(f"{where}.text", f"'{where}.text' must be a string.")
    return TextPart(part["text"])


def check_content(where: str, content: Any, text_types: tuple[str, ...] = (TEXT_PART,)) -> Content:
    """A message's `content`: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return tuple(check_part(f"{where}[{j}]", part, text_types)
                     for j, part in enumerate(content))
    raise bad(where, f"'{where}' must be a string or a list of content parts.")


def joined_text(parts: tuple[TextPart, ...]) -> str:
    return PART_JOINER.join(part.text for part in parts)


def _call_for_template(call: ToolCall) -> dict:
    head = {} if call.id is None else {"id": call.id}
    return {**head, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def _content_for_template(content: Content, iterates_parts: bool) -> str | list[dict]:
    if isinstance(content, str):
        return content
    if not iterates_parts:
        return joined_text(content)
    return [{"type": TEXT_PART, "text": part.text} for part in content]


def message_for_template(message: Message, iterates_parts: bool) -> dict:
    out: dict[str, Any] = {"role": ROLE_ALIASES.get(message.role, message.role),
                           "content": _content_for_template(message.content, iterates_parts)}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_calls is not None:
        out["tool_calls"] = [_call_for_template(call) for call in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.reasoning_content is not None:
        out["reasoning_content"] = message.reasoning_content
    out.update(message.extra)
    return out


def for_template(messages: tuple[Message, ...], iterates_parts: bool) -> list[dict]:
    """Messages -> what the template is given: the one conversion to plain values."""
    return [message_for_template(m, iterates_parts) for m in messages]
