"""Content parts and the developer role: validation (400/422 naming the part) and what the
chat template is given (joined text, or the parts as given)."""
from __future__ import annotations

import json
from datetime import datetime

import pytest

from engine.api import load_model
from server.errors import ApiError
from server.text.messages import Message, TextPart, check_content, for_template
from server.text.served import ServedModel
from server.api.chat.request import parse_chat
from template import Template
from tests.oracle import read_jsonl

TEXT = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
PARTS = (TextPart("one"), TextPart("two"))                  # TEXT as the parser types it


def refused(body: dict) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse_chat(json.dumps({"model": "m", **body}).encode())
    return info.value


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant", "tool"])
def test_every_role_accepts_text_parts(role):
    spec = parse_chat(json.dumps({"model": "m", "messages": [
        {"role": role, "content": TEXT}]}).encode())
    assert spec.messages[0].content == (TextPart("one"), TextPart("two"))


@pytest.mark.parametrize("kind", ["image_url", "input_audio", "file"])
def test_media_parts_are_422_naming_the_part_type(kind):
    err = refused({"messages": [{"role": "user", "content": "hi"},
                                {"role": "user", "content": [TEXT[0], {"type": kind}]}]})
    assert (err.status, err.param) == (422, "messages[1].content[1].type")
    assert err.document()["error"]["code"] == "unsupported_parameter"
    assert kind in err.message


@pytest.mark.parametrize("part, param", [
    ("text", "messages[0].content[0]"), ({"type": "nope"}, "messages[0].content[0].type"),
    ({"type": "text", "text": 3}, "messages[0].content[0].text"),
    ({"text": "x"}, "messages[0].content[0].type"),
])
def test_malformed_parts_are_400_naming_the_part(part, param):
    err = refused({"messages": [{"role": "user", "content": [part]}]})
    assert (err.status, err.param) == (400, param)


def test_content_neither_string_nor_list_is_400():
    with pytest.raises(ApiError) as info:
        check_content("messages[0].content", {"type": "text"})
    assert info.value.status == 400 and info.value.param == "messages[0].content"


def test_plain_templates_get_parts_joined_with_newlines_and_developer_as_system():
    messages = (Message("developer", PARTS), Message("user", "hi"))
    assert for_template(messages, iterates_parts=False) == [
        {"role": "system", "content": "one\ntwo"}, {"role": "user", "content": "hi"}]
    assert messages[0].role == "developer"                        # the spec is not changed


def test_parts_templates_get_the_parts_as_given():
    messages = (Message("user", PARTS),)
    assert for_template(messages, iterates_parts=True) == [{"role": "user", "content": TEXT}]


def _as_client_sends(message: dict) -> dict:
    """`system` sent as `developer`, string content sent as one text part."""
    out = {**message, "role": "developer" if message["role"] == "system" else message["role"]}
    if isinstance(message.get("content"), str):
        out["content"] = [{"type": "text", "text": message["content"]}]
    return out


def test_developer_and_parts_render_as_hugging_face_renders_system_and_strings():
    """Every oracle case that renders: `developer` and one-part content render exactly what
    apply_chat_template made of `system` and the string (no family loops over parts)."""
    cases = [c for c in read_jsonl("template_cases.jsonl") if c["error"] is None]
    assert len(cases) > 200
    for case in cases:
        template = Template.parse(case["template_source"])
        messages = parse_chat(json.dumps({"model": "m", "messages": [
            _as_client_sends(m) for m in case["messages"]]}).encode()).messages
        rendered = template.render_chat(
            for_template(messages, template.iterates_content_parts),
            add_generation_prompt=case["add_generation_prompt"], tools=case["tools"],
            now=datetime.fromisoformat(case["frozen_now"]), **case["template_vars"])
        assert rendered == case["rendered"], case["case"]


def test_served_model_renders_developer_as_system(tiny_llama_dir):
    served = ServedModel(load_model(tiny_llama_dir), "tiny", 64)     # the plain default template
    as_developer = served.render((Message("developer", PARTS),))
    assert as_developer == "<|system|>\none\ntwo\n<|assistant|>\n"
