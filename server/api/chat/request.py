"""The chat request, `POST /v1/chat/completions`: read, checked and started.

`chat`, the handler (on a pool thread): served model -> tools -> chat template -> tokens ->
the generation, started by server/api/launch.py, whose stream renders with the renderer of
server/api/chat/render.py.

`parse_chat(body)` -> `GenSpec` (kind "chat") with the conversation as
typed `Message`s (server/text/messages.py), built once here from the JSON. Content parts are
checked by the text layer; `tools`, `tool_choice`, `parallel_tool_calls` and the history's
`tool_calls` by server/api/tools.py; `chat_template_kwargs` and `reasoning_effort` by
server/api/thinking.py; `prediction` by server/api/prediction.py; the shared sampling
fields by server/api/generation.py.
`parse_messages` serves /tokenize too.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.api import MAX_TOP_LOGPROBS
from server.api.chat.render import renderer
from server.api.defaults import SamplingDefaults
from server.api.fields import bad, boolean, integer, load_json_object, unsupported
from server.api.generation import DEFAULT_MAX_STOP_STRINGS, GenSpec, common_fields
from server.api.launch import (ApiContext, Endpoint, chat_prompt, launch_generation,
                               with_tools)
from server.api.streams import GenerationStream
from server.api.prediction import parse_prediction
from server.api.thinking import template_variables
from server.api.tools import check_tool_calls, check_tool_message, parse_tools
from server.door.routes import Params
from server.http.protocol import Request
from server.replies import Headers
from server.text.messages import Message, check_content

CHAT = Endpoint(route="chat", id_prefix="chatcmpl", prompt_param="messages")
MAX_MESSAGES = 4096             # a conversation longer than this is abuse, not chat
ROLES = frozenset({"system", "user", "assistant", "developer", "tool"})
MESSAGE_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id",
                            "reasoning_content"})


def chat(api: ApiContext, request: Request, params: Params, extra: Headers) -> GenerationStream:
    spec = parse_chat(request.body, api.defaults_for(request.body), api.max_stop_strings)
    with api.serving(spec.model) as ctx:
        spec, offered = with_tools(ctx, spec)
        spec, prompt = chat_prompt(ctx, spec, offered)
        return launch_generation(ctx, request, spec, [prompt], CHAT, extra,
                                 lambda header: renderer(spec, header))


def _message(i: int, m: Any) -> Message:
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad(where, f"'{where}' must be an object with 'role' and 'content'.")
    role = m.get("role")
    if role not in ROLES:
        raise bad(f"{where}.role", f"{role!r} is not a valid role; expected one of "
                                   f"{', '.join(sorted(ROLES))}.")
    content = m.get("content")
    if content is None and role == "assistant":
        content = ""
    content = check_content(f"{where}.content", content)     # a string or text parts
    calls = m.get("tool_calls")
    if calls is not None:
        calls = check_tool_calls(f"{where}.tool_calls", calls)
    if role == "tool":
        check_tool_message(where, m)
    reasoning = m.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        raise bad(f"{where}.reasoning_content", f"'{where}.reasoning_content' must be a string.")
    extra = () if m.keys() <= MESSAGE_FIELDS else tuple(   # fields a template may read
        (k, v) for k, v in m.items() if k not in MESSAGE_FIELDS and v is not None)
    return Message(role, content, m.get("name"), calls, m.get("tool_call_id"), extra,
                   reasoning)


def parse_messages(doc: dict) -> tuple[Message, ...]:
    """`messages` for the chat template: 1..MAX_MESSAGES checked messages (chat, tokenize)."""
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "'messages' must be a non-empty list of messages.")
    if len(messages) > MAX_MESSAGES:
        raise bad("messages", f"'messages' allows at most {MAX_MESSAGES} entries.")
    return tuple(_message(i, m) for i, m in enumerate(messages))


def parse_chat(body: bytes, defaults: SamplingDefaults = SamplingDefaults(),
               max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS) -> GenSpec:
    doc = load_json_object(body)
    checked = parse_messages(doc)
    logprobs = boolean(doc, "logprobs")
    top = integer(doc, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if top and not logprobs:
        raise bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.")
    common = common_fields(doc, "chat", default_max=defaults.max_tokens, logprobs=logprobs,
                           top_logprobs=top, defaults=defaults,
                           max_stop_strings=max_stop_strings)
    tools = parse_tools(doc)
    if tools is not None and tools.forced and common.structured:
        raise unsupported("tool_choice", f"A forced 'tool_choice' cannot be combined with "
                                         f"'{common.structured.param}'.")
    return replace(common, messages=checked, tools=tools,
                   template_vars=template_variables(doc), prediction=parse_prediction(doc))
