"""Function tools in the Responses API, on chat's tool machinery (server/api/tools.py validates
and builds the call grammar, server/text/toolparse.py splits the model's text into calls).

    tools:        [{"type": "function", "name", "description"?, "parameters"?, "strict"?}]
                  -> chat's {"type": "function", "function": {...}}; any other type is a
                  built-in tool (web_search, file_search, code_interpreter, mcp, ...) that
                  runs on OpenAI's side: this server has none, 422 naming `tools[i].type`
    tool_choice:  "none" | "auto" | "required" | {"type": "function", "name"}
    input items:  function_call {call_id, name, arguments} -> a call of an assistant turn
                  (parse.py joins consecutive calls, and an assistant message just
                  before them, into one turn, as the answer that made them was);
                  function_call_output {call_id, output} -> a `tool` message
    output items: after the message item (only when the answer has text), each call as
                  {"type": "function_call", "id": "fc_..", "call_id": "call_..", "name",
                  "arguments" (JSON text), "status": "completed"}; streamed as
                  output_item.added (arguments ""), function_call_arguments.delta (fragments),
                  function_call_arguments.done, output_item.done
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from server.api.fields import bad, unsupported
from server.api.tools import ToolsSpec, argument_fragments, call_arguments, parse_tools
from server.text.messages import Message, ToolCall, check_content
from server.text.toolformats import ToolCallFormat
from server.text.toolparse import CallOut, new_call_id

FUNCTION = "function"
TOOL_CHOICE_MODES = ("none", "auto", "required")
FUNCTION_FIELDS = ("name", "description", "parameters", "strict")
RESPONSES_PARAMETERS_AT = "tools[{i}].parameters"    # where an invalid schema is named
OUTPUT_PARTS = ("input_text",)                       # a function_call_output's text parts


# ---- the request: tools and tool_choice ------------------------------------------------------

def _function_tool(i: int, tool: Any) -> dict:
    """A flat Responses function tool -> chat's tool shape (the flat names in errors)."""
    where = f"tools[{i}]"
    if not isinstance(tool, dict):
        raise bad(where, f"'{where}' must be a tool object with a 'type'.")
    kind = tool.get("type")
    if kind != FUNCTION:
        if not isinstance(kind, str):
            raise bad(f"{where}.type", f"'{where}.type' must be a string such as 'function'.")
        raise unsupported(f"{where}.type", f"Tools of type {kind!r} are not supported: this "
                                           "server runs no built-in tools, only 'function' "
                                           "tools, which the client runs.")
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise bad(f"{where}.name", f"'{where}.name' must be a non-empty string.")
    if tool.get("description") is not None and not isinstance(tool["description"], str):
        raise bad(f"{where}.description", f"'{where}.description' must be a string.")
    if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
        raise bad(f"{where}.parameters", f"'{where}.parameters' must be a JSON Schema object.")
    if tool.get("strict") is not None and not isinstance(tool["strict"], bool):
        raise bad(f"{where}.strict", f"'{where}.strict' must be a boolean.")
    return {"type": FUNCTION,
            "function": {k: tool[k] for k in FUNCTION_FIELDS if tool.get(k) is not None}}


def _tool_choice(value: Any) -> str | dict | None:
    """The Responses `tool_choice` -> chat's (a named function moves under `function`)."""
    if value is None or value in TOOL_CHOICE_MODES:
        return value
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == FUNCTION and isinstance(value.get("name"), str):
        return {"type": FUNCTION, "function": {"name": value["name"]}}
    if isinstance(kind, str) and kind != FUNCTION:
        raise unsupported("tool_choice", f"'tool_choice' of type {kind!r} is not supported: "
                                         "this server serves function tools only.")
    raise bad("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                             "{\"type\": \"function\", \"name\": ...}.")


def parse_response_tools(doc: dict) -> ToolsSpec | None:
    """`tools`, `tool_choice`, `parallel_tool_calls` -> chat's ToolsSpec, or None."""
    raw = doc.get("tools")
    if raw is not None and not isinstance(raw, list):
        raise bad("tools", "'tools' must be a list of tools.")
    chat = {"tools": None if raw is None else [_function_tool(i, t) for i, t in enumerate(raw)],
            "tool_choice": _tool_choice(doc.get("tool_choice"))}
    if "parallel_tool_calls" in doc:
        chat["parallel_tool_calls"] = doc["parallel_tool_calls"]
    spec = parse_tools({k: v for k, v in chat.items() if v is not None})
    return None if spec is None else replace(spec, parameters_at=RESPONSES_PARAMETERS_AT)


def tools_echo(spec: ToolsSpec | None) -> list[dict]:
    """The `tools` the response object echoes, in the Responses API's flat shape."""
    if spec is None:
        return []
    return [{"type": FUNCTION, "description": None, "parameters": None, "strict": None,
             **t["function"]} for t in spec.tools]


# ---- the request: call items of the history --------------------------------------------------

def _text(where: str, item: dict, name: str) -> str:
    if not isinstance(item.get(name), str) or not item[name]:
        raise bad(f"{where}.{name}", f"'{where}.{name}' must be a non-empty string.")
    return item[name]


def function_call(where: str, item: dict) -> ToolCall:
    """A `function_call` input item -> one chat tool call (arguments parsed, as chat's are)."""
    call_id, name = _text(where, item, "call_id"), _text(where, item, "name")
    arguments = call_arguments(f"{where}.arguments", item.get("arguments", "{}"))
    return ToolCall(name, arguments, call_id)


def tool_message(where: str, item: dict) -> Message:
    """A `function_call_output` input item -> the `tool` message that answers its call."""
    call_id, output = _text(where, item, "call_id"), item.get("output")
    if isinstance(output, list):
        output = check_content(f"{where}.output", output, OUTPUT_PARTS)
    elif not isinstance(output, str):
        raise bad(f"{where}.output", f"'{where}.output' must be a string or a list of "
                                     "input_text parts.")
    return Message("tool", output, tool_call_id=call_id)


# ---- the answer: function_call items and their events ---------------------------------------

@dataclass(frozen=True)
class FunctionCall:
    """One call of the answer, with its ids: `id` names the item, `call_id` the call (the
    client's function_call_output answers it)."""
    id: str
    call_id: str
    name: str
    arguments: str                              # JSON text

    @classmethod
    def of(cls, call: CallOut, fmt: ToolCallFormat) -> FunctionCall:
        """`call_id` as chat mints it (`new_call_id`): it comes back in the history's
        function_call items, and a Mistral template takes 9-character ids only."""
        return cls(f"fc_{os.urandom(12).hex()}", new_call_id(fmt), call.name,
                   call.arguments_json)


def function_call_item(call: FunctionCall, arguments: str | None = None,
                       status: str = "completed") -> dict:
    return {"type": "function_call", "id": call.id, "call_id": call.call_id, "name": call.name,
            "arguments": call.arguments if arguments is None else arguments, "status": status}


def call_events(call: FunctionCall, output_index: int) -> list[dict]:
    """A complete call's streamed events (numbered by the caller), in order."""
    at = {"item_id": call.id, "output_index": output_index}
    return ([{"type": "response.output_item.added", "output_index": output_index,
              "item": function_call_item(call, "", "in_progress")}]
            + [{"type": "response.function_call_arguments.delta", **at, "delta": fragment}
               for fragment in argument_fragments(call.arguments)]
            + [{"type": "response.function_call_arguments.done", **at, "name": call.name,
                "arguments": call.arguments},
               {"type": "response.output_item.done", "output_index": output_index,
                "item": function_call_item(call)}])
