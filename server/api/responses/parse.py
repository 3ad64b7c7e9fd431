"""The Responses request: `parse_responses(body)` -> `ResponsesSpec` (a chat `GenSpec` of
kind "responses", typed `Message`s built once from `instructions` and the `input` items, and
the settings the answer echoes). Function tools and the call items of the history are
server/api/responses/tools.py; nothing is stored, so stateful fields are 422.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from engine.api import GrammarSpec, SamplingParams, schema_spec
from server.api.defaults import SamplingDefaults
from server.api.fields import (bad, boolean, integer, load_json_object, model_name, number,
                               unsupported)
from server.api.generation import GenSpec, cache_salt
from server.api.responses.tools import function_call, parse_response_tools, tool_message
from server.api.structured import Structured
from server.api.thinking import reasoning_effort, template_variables
from server.text.messages import Message, check_content

MAX_INPUT_ITEMS = 4096          # as many as chat's MAX_MESSAGES
INPUT_ROLES = frozenset({"user", "assistant", "system", "developer"})
TEXT_PARTS = ("input_text", "output_text")  # output_text: an earlier answer sent back
# Items a stateful server or one with custom (grammar) tools would take.
UNSERVED_ITEMS = frozenset({"item_reference", "custom_tool_call", "custom_tool_call_output"})
REASONING_PARTS = ("reasoning_text",)   # a reasoning item's content, sent back
# Request fields that need server-side state: refused when set (not when false / null).
STATEFUL_FIELDS = ("previous_response_id", "conversation")
NO_STATE = ("This server is stateless: it stores no responses, so '{name}' is not supported; "
            "send the whole conversation in 'input'.")


@dataclass(frozen=True, kw_only=True)
class ResponsesSpec:
    """A validated Responses request: the generation and what the answer echoes."""
    gen: GenSpec
    instructions: str | None = None
    max_output_tokens: int | None = None
    text_format: dict = field(default_factory=lambda: {"type": "text"})
    tool_choice: str | dict = "auto"
    parallel_tool_calls: bool = True
    metadata: dict = field(default_factory=dict)
    user: str | None = None


def _item(i: int, item: Any) -> Message:
    where = f"input[{i}]"
    if not isinstance(item, dict):
        raise bad(where, f"'{where}' must be a message item with 'role' and 'content'.")
    kind = item.get("type", "message")
    if kind in UNSERVED_ITEMS:
        raise unsupported(f"{where}.type", f"Input items of type {kind!r} are not supported "
                                           "(no stored state or custom tools).")
    if kind != "message":
        raise bad(f"{where}.type", f"{kind!r} is not a valid input item type; expected "
                                   "'message', 'function_call' or 'function_call_output'.")
    role = item.get("role")
    if role not in INPUT_ROLES:
        raise bad(f"{where}.role", f"{role!r} is not a valid role; expected one of "
                                   f"{', '.join(sorted(INPUT_ROLES))}.")
    # a string, or text parts of the Responses API's types (chat's check)
    return Message(role, check_content(f"{where}.content", item.get("content"), TEXT_PARTS))


def _reasoning(i: int, item: dict) -> Message:
    """A `reasoning` item sent back: an assistant turn holding only its reasoning text (the
    message or calls after it join it). Items with a summary only carry no text."""
    parts = check_content(f"input[{i}].content", item.get("content") or [], REASONING_PARTS)
    return Message("assistant", "", reasoning_content="".join(p.text for p in parts))


def _joins_reasoning(turns: list[Message], message: Message) -> bool:
    """An assistant message right after a reasoning item is that reasoning's answer."""
    if message.role != "assistant" or not turns:
        return False
    last = turns[-1]
    return (last.role == "assistant" and last.reasoning_content is not None
            and last.content == "" and last.tool_calls is None)


def _turns(items: list) -> list[Message]:
    """Input items -> chat messages; `function_call` items join the assistant turn before
    them (a message item or earlier calls), else start one; a `reasoning` item starts the
    assistant turn after it; outputs are `tool` messages."""
    turns: list[Message] = []
    for i, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "reasoning":
            turns.append(_reasoning(i, item))
        elif kind == "function_call":
            call = function_call(f"input[{i}]", item)
            if turns and turns[-1].role == "assistant":
                turns[-1] = replace(turns[-1], tool_calls=(turns[-1].tool_calls or ()) + (call,))
            else:
                turns.append(Message("assistant", "", tool_calls=(call,)))
        elif kind == "function_call_output":
            turns.append(tool_message(f"input[{i}]", item))
        else:
            message = _item(i, item)
            if _joins_reasoning(turns, message):
                message = replace(message, reasoning_content=turns.pop().reasoning_content)
            turns.append(message)
    return turns


def _messages(doc: dict, instructions: str | None) -> tuple[Message, ...]:
    """`instructions` as the system message, then `input`'s messages in order."""
    given = doc.get("input")
    if isinstance(given, str):
        items = [Message("user", given)]
    elif isinstance(given, list) and given:
        if len(given) > MAX_INPUT_ITEMS:
            raise bad("input", f"'input' allows at most {MAX_INPUT_ITEMS} items.")
        items = _turns(given)
    else:
        raise bad("input", "'input' must be a string or a non-empty list of message items.")
    head = [] if instructions is None else [Message("system", instructions)]
    return tuple(head + items)


def _text_format(doc: dict) -> tuple[dict, Structured | None]:
    """`text.format` -> (its echo, the grammar it asks for). `text` is a no-op."""
    text = doc.get("text")
    if text is None:
        return {"type": "text"}, None
    if not isinstance(text, dict):
        raise bad("text", "'text' must be an object with a 'format'.")
    fmt = text.get("format")
    if fmt is None:
        return {"type": "text"}, None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return fmt, None
    if kind == "json_object":
        return fmt, Structured("text.format", GrammarSpec("json_object"))
    if kind != "json_schema":
        raise bad("text.format.type", "'text.format.type' must be 'text', 'json_object' or "
                                      "'json_schema'.")
    if not isinstance(fmt.get("name"), str):
        raise bad("text.format.name", "'text.format' json_schema needs a 'name' string.")
    if not isinstance(fmt.get("schema"), (dict, bool)):
        raise bad("text.format.schema", "'text.format.schema' must be a JSON Schema object.")
    if fmt.get("strict") is not None and not isinstance(fmt["strict"], bool):
        raise bad("text.format.strict", "'strict' must be a boolean.")
    return fmt, Structured("text.format.schema", schema_spec(fmt["schema"]))


def _refuse_unserved(doc: dict) -> None:
    if doc.get("store") is True:
        raise unsupported("store", NO_STATE.format(name="store") + " Send 'store': false.")
    for name in STATEFUL_FIELDS:
        if doc.get(name) is not None:
            raise unsupported(name, NO_STATE.format(name=name))
    if doc.get("background") is True:
        raise unsupported("background", NO_STATE.format(name="background"))


def _effort(doc: dict) -> str | None:
    """`reasoning: {"effort": ...}` (its `summary` asks for summaries: none are made)."""
    reasoning = doc.get("reasoning")
    if reasoning is None:
        return None
    if not isinstance(reasoning, dict):
        raise bad("reasoning", "'reasoning' must be an object with an 'effort'.")
    return reasoning_effort(reasoning.get("effort"), "reasoning.effort")


def _optional_str(doc: dict, name: str) -> str | None:
    v = doc.get(name)
    if v is not None and not isinstance(v, str):
        raise bad(name, f"'{name}' must be a string.")
    return v


def parse_responses(body: bytes, defaults: SamplingDefaults = SamplingDefaults()) -> ResponsesSpec:
    doc = load_json_object(body)
    _refuse_unserved(doc)
    model = model_name(doc)
    instructions = _optional_str(doc, "instructions")
    messages = _messages(doc, instructions)
    max_output = integer(doc, "max_output_tokens", None, 1)
    fmt, structured = _text_format(doc)
    tools = parse_response_tools(doc)
    if tools is not None and tools.forced and structured is not None:
        raise unsupported("tool_choice", "A forced 'tool_choice' cannot be combined with "
                                         "'text.format'.")
    metadata = doc.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad("metadata", "'metadata' must be an object.")
    params = SamplingParams(
        temperature=number(doc, "temperature", defaults.temperature, 0.0, 2.0),
        top_p=number(doc, "top_p", defaults.top_p, 0.0, 1.0, lo_open=True),
        top_k=defaults.top_k, min_p=defaults.min_p,
        repetition_penalty=defaults.repetition_penalty)
    gen = GenSpec(kind="responses", model=model, messages=messages,
                  max_tokens=defaults.max_tokens if max_output is None else max_output,
                  params=params, stream=boolean(doc, "stream"), structured=structured,
                  tools=tools, template_vars=template_variables(doc, _effort(doc)),
                  cache_salt=cache_salt(doc))
    return ResponsesSpec(gen=gen, instructions=instructions, max_output_tokens=max_output,
                         text_format=fmt, tool_choice=doc.get("tool_choice") or "auto",
                         parallel_tool_calls=boolean(doc, "parallel_tool_calls", True),
                         metadata=metadata or {}, user=_optional_str(doc, "user"))


