"""Chat messages as clients send them -> messages as the chat template reads them.

Two steps, on the loop thread:

1. `check_content(where, content)` (validation, from server/api/parse.py): `content` is a
   string or a list of parts. A `text` part is `{"type": "text", "text": str}`; an image,
   audio or file part is a 422 naming `messages[i].content[j].type` (this server serves
   text models); any other part is a 400. Every role may send parts.
2. `for_template(messages, iterates_parts)` (rendering, from server/api/app.py): the
   `developer` role becomes `system` (OpenAI's name for the system instruction; the
   templates know no `developer` turn), and a list of parts becomes its text parts
   joined with "\n" (as vLLM does), unless the template loops over the parts itself
   (template/contentparts.py): then it gets them as given, which is what Hugging Face's
   `apply_chat_template` hands it.
"""
from __future__ import annotations

from typing import Any

from server.errors import ApiError

TEXT_PART = "text"
# Part types of real OpenAI-style clients that need a modality this server has not got.
MEDIA_PARTS = frozenset({"image_url", "input_image", "image", "input_audio", "audio",
                         "file", "input_file", "video", "video_url"})
PART_JOINER = "\n"
ROLE_ALIASES = {"developer": "system"}


def _bad(param: str, message: str) -> ApiError:
    return ApiError("invalid_request", message, param=param)


def check_part(where: str, part: Any, text_types: tuple[str, ...] = (TEXT_PART,)) -> dict:
    """One content part -> the part itself (a text part, its type one of `text_types`), or
    the 400/422 naming it."""
    if not isinstance(part, dict):
        raise _bad(where, f"'{where}' must be an object with 'type' and 'text'.")
    kind = part.get("type")
    if kind in MEDIA_PARTS:
        raise ApiError("unsupported_parameter", f"Content parts of type {kind!r} are not "
                       "supported: this model reads text only.", param=f"{where}.type")
    if kind not in text_types:
        expected = " or ".join(repr(t) for t in text_types)
        raise _bad(f"{where}.type", f"{kind!r} is not a valid content part type; expected "
                                    f"{expected}.")
    if not isinstance(part.get("text"), str):
        raise _bad(f"{where}.text", f"'{where}.text' must be a string.")
    return part


def check_content(where: str, content: Any,
                  text_types: tuple[str, ...] = (TEXT_PART,)) -> str | list[dict]:
    """A message's `content`: a string, or a list of text parts (kept as given)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return [check_part(f"{where}[{j}]", part, text_types) for j, part in enumerate(content)]
    raise _bad(where, f"'{where}' must be a string or a list of content parts.")


def joined_text(parts: list[dict]) -> str:
    return PART_JOINER.join(part["text"] for part in parts)


def for_template(messages: tuple[dict, ...], iterates_parts: bool) -> list[dict]:
    """Checked messages -> what the template is given (new dicts; the spec is unchanged)."""
    out = []
    for message in messages:
        m = dict(message)
        m["role"] = ROLE_ALIASES.get(m["role"], m["role"])
        if isinstance(m.get("content"), list) and not iterates_parts:
            m["content"] = joined_text(m["content"])
        out.append(m)
    return out
