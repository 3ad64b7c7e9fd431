"""The Anthropic Messages request -> the same `GenSpec` and typed `Message`s the chat route
builds, so the rest of the path (tools, template, grammar, launch) is chat's.

    system                 a string or text blocks            -> a `system` Message
    messages[i] user       a string, or text + tool_result blocks
                                                   -> `user` Messages, and a `tool` Message
                                                      per tool_result (its tool_use_id)
    messages[i] assistant  a string, or text + tool_use + thinking blocks
                                                   -> one `assistant` Message: its text,
                                                      `tool_calls` (input as the arguments),
                                                      `reasoning_content` (the thinking)
    tools                  {name, description, input_schema}  -> chat's function tools
    tool_choice            auto | any | tool (name) | none, disable_parallel_tool_use
                                                   -> auto | required | named | none
    thinking               enabled (budget_tokens) | adaptive | disabled -> `enable_thinking`
                           for the template; absent is disabled, Anthropic's default
    max_tokens (required), temperature 0..1, top_p, top_k, stop_sequences, stream
                           -> `common_fields`, with Anthropic's names and ranges

`budget_tokens` is checked (>= 1024 and below `max_tokens`, as Anthropic requires) but not
enforced: the model thinks until it closes its tag, and `max_tokens` bounds the whole answer.
Images, documents and search results are a 400, as are server tools (a tool with a `type`
other than "custom", `mcp_servers`, `container`) and a final assistant turn (a prefill);
`cache_control`, `citations` on text blocks, `metadata`, `service_tier` and redacted
thinking sent back are accepted and ignored. Unknown fields are ignored.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from server.api.chat.request import MAX_MESSAGES
from server.api.defaults import SamplingDefaults
from server.api.fields import bad, load_json_object
from server.api.generation import DEFAULT_MAX_STOP_STRINGS, GenSpec, common_fields
from server.api.tools import parse_tools
from server.text.messages import Message, TextPart, ToolCall
from server.text.reasoning import ENABLE_THINKING

MAX_TEMPERATURE = 1.0           # Anthropic's range is 0..1
MIN_THINKING_BUDGET_TOKENS = 1024
# The fields `common_fields` reads, under their Anthropic names (the OpenAI-only fields of a
# body, `n` or `seed` say, are unknown here and ignored).
SHARED_FIELDS = ("model", "max_tokens", "temperature", "top_p", "top_k", "stop_sequences",
                 "stream")
MEDIA_BLOCKS = frozenset({"image", "document", "search_result", "container_upload"})
SERVER_FIELDS = ("mcp_servers", "container")
PARAMETERS_AT = "tools[{i}].input_schema"
CUSTOM_TOOL = "custom"
CHOICES = {"auto": "auto", "any": "required", "none": "none"}   # "tool" names its function
THINKING_ON, THINKING_OFF, THINKING_ADAPTIVE = "enabled", "disabled", "adaptive"


def _text_block(where: str, block: dict) -> TextPart:
    if not isinstance(block.get("text"), str):
        raise bad(f"{where}.text", f"'{where}.text' must be a string.")
    return TextPart(block["text"])


def _block_type(where: str, block: Any, allowed: tuple[str, ...]) -> str:
    """A content block's `type`, one of `allowed`; media and unknown blocks are a 400."""
    if not isinstance(block, dict):
        raise bad(where, f"'{where}' must be a content block object with a 'type'.")
    kind = block.get("type")
    if kind in MEDIA_BLOCKS:
        raise bad(f"{where}.type", f"Content blocks of type {kind!r} are not supported: this "
                                   "model reads text only.")
    if kind not in allowed:
        raise bad(f"{where}.type", f"{kind!r} is not a valid content block type here; "
                                   f"expected one of {', '.join(allowed)}.")
    return kind


def _blocks(where: str, content: Any) -> list:
    if not isinstance(content, list):
        raise bad(where, f"'{where}' must be a string or a list of content blocks.")
    return content


def _text_blocks(where: str, content: Any) -> tuple[TextPart, ...]:
    """A list of text blocks (a system prompt, a tool result's content) -> their parts."""
    parts = []
    for j, block in enumerate(_blocks(where, content)):
        _block_type(f"{where}[{j}]", block, ("text",))
        parts.append(_text_block(f"{where}[{j}]", block))
    return tuple(parts)


def _system(doc: dict) -> tuple[Message, ...]:
    system = doc.get("system")
    if system is None:
        return ()
    if isinstance(system, str):
        return (Message("system", system),) if system else ()
    return (Message("system", _text_blocks("system", system)),)


def _tool_result(where: str, block: dict) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise bad(f"{where}.tool_use_id", f"'{where}.tool_use_id' must be a non-empty string.")
    if block.get("is_error") is not None and not isinstance(block["is_error"], bool):
        raise bad(f"{where}.is_error", f"'{where}.is_error' must be a boolean.")
    content = block.get("content", "")
    if not isinstance(content, str):
        content = _text_blocks(f"{where}.content", content)
    return Message("tool", content, tool_call_id=call_id)


def _user(where: str, content: Any) -> list[Message]:
    """A user turn: its text runs as `user` Messages, each tool_result as a `tool` one, in
    the order they came."""
    if isinstance(content, str):
        return [Message("user", content)]
    out: list[Message] = []
    texts: list[TextPart] = []
    for j, block in enumerate(_blocks(f"{where}.content", content)):
        at = f"{where}.content[{j}]"
        if _block_type(at, block, ("text", "tool_result")) == "text":
            texts.append(_text_block(at, block))
            continue
        if texts:
            out.append(Message("user", tuple(texts)))
            texts = []
        out.append(_tool_result(at, block))
    if texts or not out:
        out.append(Message("user", tuple(texts)))
    return out


def _tool_use(where: str, block: dict) -> ToolCall:
    for name in ("id", "name"):
        if not isinstance(block.get(name), str) or not block[name]:
            raise bad(f"{where}.{name}", f"'{where}.{name}' must be a non-empty string.")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise bad(f"{where}.input", f"'{where}.input' must be an object.")
    return ToolCall(block["name"], arguments, block["id"])


def _assistant(where: str, content: Any) -> Message:
    """An assistant turn: its text, its tool calls and the thinking it sent back."""
    if isinstance(content, str):
        return Message("assistant", content)
    texts: list[TextPart] = []
    calls: list[ToolCall] = []
    thinking: list[str] = []
    allowed = ("text", "tool_use", "thinking", "redacted_thinking")
    for j, block in enumerate(_blocks(f"{where}.content", content)):
        at = f"{where}.content[{j}]"
        kind = _block_type(at, block, allowed)
        if kind == "text":
            texts.append(_text_block(at, block))
        elif kind == "tool_use":
            calls.append(_tool_use(at, block))
        elif kind == "thinking":
            if not isinstance(block.get("thinking"), str):
                raise bad(f"{at}.thinking", f"'{at}.thinking' must be a string.")
            thinking.append(block["thinking"])        # its signature is not checked
    return Message("assistant", tuple(texts), tool_calls=tuple(calls) or None,
                   reasoning_content="".join(thinking) if thinking else None)


def parse_conversation(doc: dict) -> tuple[Message, ...]:
    """`system` and `messages` -> the typed conversation for the chat template."""
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "'messages' must be a non-empty list of messages.")
    if len(messages) > MAX_MESSAGES:
        raise bad("messages", f"'messages' allows at most {MAX_MESSAGES} entries.")
    out = list(_system(doc))
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad(f"{where}.role", f"'{where}' must be an object whose 'role' is 'user' "
                                       "or 'assistant'.")
        if m["role"] == "user":
            out += _user(where, m.get("content"))
        else:
            out.append(_assistant(where, m.get("content")))
    if out[-1].role == "assistant":
        raise bad(f"messages[{len(messages) - 1}]", "A final assistant turn (a prefill of the "
                  "answer) is not supported: end 'messages' with a user turn.")
    return tuple(out)


def _tool(i: int, tool: Any) -> dict:
    """An Anthropic tool -> chat's function tool."""
    where = f"tools[{i}]"
    if not isinstance(tool, dict):
        raise bad(where, f"'{where}' must be a tool object.")
    if tool.get("type", CUSTOM_TOOL) != CUSTOM_TOOL:
        raise bad(f"{where}.type", f"Server tools ({tool.get('type')!r}) are not supported: "
                                   "this server runs client tools only.")
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise bad(f"{where}.name", f"'{where}.name' must be a non-empty string.")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise bad(f"{where}.input_schema", f"'{where}.input_schema' must be a JSON Schema object.")
    function = {"name": tool["name"], "parameters": schema}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(value: Any, names: list[str]) -> tuple[Any, bool]:
    """Anthropic's `tool_choice` -> chat's, and whether calls may be several."""
    if value is None:
        return None, True
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise bad("tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | "
                                 "\"tool\" | \"none\"} (\"tool\" with its \"name\").")
    no_parallel = value.get("disable_parallel_tool_use", False)
    if not isinstance(no_parallel, bool):
        raise bad("tool_choice.disable_parallel_tool_use",
                  "'tool_choice.disable_parallel_tool_use' must be a boolean.")
    if kind == "any" and not names:
        raise bad("tool_choice", "'tool_choice' 'any' needs 'tools'.")
    if kind != "tool":
        return CHOICES[kind], not no_parallel
    name = value.get("name")
    if not isinstance(name, str) or name not in names:
        raise bad("tool_choice.name", f"'tool_choice' names the tool {name!r}, which is not in "
                                      "'tools'.")
    return {"type": "function", "function": {"name": name}}, not no_parallel


def _tools(doc: dict):
    raw = doc.get("tools")
    if raw is not None and not isinstance(raw, list):
        raise bad("tools", "'tools' must be a list of tools.")
    tools = [_tool(i, t) for i, t in enumerate(raw or ())]
    names = [t["function"]["name"] for t in tools]
    choice, parallel = _tool_choice(doc.get("tool_choice"), names)
    chat = {"tools": tools if raw is not None else None, "tool_choice": choice,
            "parallel_tool_calls": parallel}
    spec = parse_tools({k: v for k, v in chat.items() if v is not None})
    return None if spec is None else replace(spec, parameters_at=PARAMETERS_AT)


def _thinking(doc: dict, max_tokens: int | None) -> tuple[tuple[str, Any], ...]:
    """`thinking` -> the template's switch (`enable_thinking`)."""
    value = doc.get("thinking")
    if value is None:
        return ((ENABLE_THINKING, False),)
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == THINKING_OFF:
        return ((ENABLE_THINKING, False),)
    if kind == THINKING_ADAPTIVE:                   # the model decides: its template's switch on
        return ((ENABLE_THINKING, True),)
    if kind != THINKING_ON:
        raise bad("thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, "
                              "{\"type\": \"adaptive\"} or {\"type\": \"disabled\"}.")
    budget = value.get("budget_tokens")
    if (not isinstance(budget, int) or isinstance(budget, bool)
            or budget < MIN_THINKING_BUDGET_TOKENS
            or (max_tokens is not None and budget >= max_tokens)):
        raise bad("thinking.budget_tokens", f"'thinking.budget_tokens' must be an integer >= "
                  f"{MIN_THINKING_BUDGET_TOKENS} and less than 'max_tokens'.")
    return ((ENABLE_THINKING, True),)


def _refuse_server_features(doc: dict) -> None:
    for name in SERVER_FIELDS:
        if doc.get(name) is not None:
            raise bad(name, f"'{name}' is not supported: this server runs no server tools.")


def parse_messages_request(body: bytes, defaults: SamplingDefaults = SamplingDefaults(),
                           max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS, *,
                           counting: bool = False) -> GenSpec:
    """The body of /v1/messages (or, `counting`, of /v1/messages/count_tokens, which has no
    `max_tokens`) -> a chat `GenSpec`."""
    doc = load_json_object(body)
    if not counting and doc.get("max_tokens") is None:
        raise bad("max_tokens", "'max_tokens' is required.")
    _refuse_server_features(doc)
    conversation = parse_conversation(doc)
    shared = {name: doc[name] for name in SHARED_FIELDS if name in doc}
    if counting:
        shared.pop("max_tokens", None)
    common = common_fields(shared, "chat", default_max=None, logprobs=False, top_logprobs=0,
                           defaults=defaults, max_stop_strings=max_stop_strings,
                           max_temperature=MAX_TEMPERATURE, stop_param="stop_sequences")
    if doc.get("metadata") is not None and not isinstance(doc["metadata"], dict):
        raise bad("metadata", "'metadata' must be an object.")
    return replace(common, messages=conversation, tools=_tools(doc),
                   template_vars=_thinking(doc, common.max_tokens))
