"""Tool calling at the API edge: `tools`, `tool_choice`, `parallel_tool_calls`, the tool
history in `messages`, and the grammar that enforces a call.

    tools:        [{"type": "function", "function": {"name", "description"?, "parameters"?}}]
    tool_choice:  "none" (no tools offered) | "auto" (the model chooses text or calls; a
                  call, once started, is grammar-constrained; the default with tools) |
                  "required" (at least one call, grammar-enforced) |
                  {"type": "function", "function": {"name": ...}} (that call, enforced)
    parallel_tool_calls: bool (default true): more than one call in an answer

The format is the served template's (server/text/toolformats.py), set by `with_format`;
the call grammar gets only its literal text (`CallSyntax`).
Every function's `parameters` compiles through the grammar cache at validation, whatever the
choice: an invalid schema is a 400 and an unserved keyword a 422, both naming the tool.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from engine.api import (GrammarCache, GrammarInvalid, GrammarSpec, GrammarUnsupported, schema_spec,
                        tool_calls_spec)
from server.errors import ApiError, bad
from server.text.messages import ToolCall
from server.text.toolformats import HERMES, ToolCallFormat

MAX_TOOLS = 128
ARG_FRAGMENT_CHARS = 32         # a streamed call's arguments go out in pieces of this many chars
EMPTY_PARAMETERS = {"type": "object", "properties": {}}
FORCED_CHOICES = ("required", "named")      # tool choices whose grammar admits calls only


@dataclass(frozen=True)
class ToolsSpec:
    """A request's validated tools. `fmt` is set by the app from the served template."""
    tools: tuple[dict, ...]                 # as the client sent them (the template's `tools`)
    choice: str                             # none | auto | required | named
    named: str | None = None                # choice == "named": the function's name
    parallel: bool = True
    fmt: ToolCallFormat = HERMES
    parameters_at: str = "tools[{i}].function.parameters"   # a function's schema, in errors

    @property
    def offered(self) -> bool:
        return bool(self.tools) and self.choice != "none"

    @property
    def forced(self) -> bool:
        """`required` or a named function: the grammar makes the whole answer calls."""
        return self.choice in FORCED_CHOICES

    def parameters(self, name: str) -> dict:
        return next(t["function"].get("parameters", EMPTY_PARAMETERS) for t in self.tools
                    if t["function"]["name"] == name)


def _tool(i: int, tool) -> dict:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        raise bad(where, f"'{where}' must be {{\"type\": \"function\", \"function\": {{...}}}}.")
    fn = tool["function"]
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise bad(f"{where}.function.name", f"'{where}.function.name' must be a non-empty string.")
    if fn.get("description") is not None and not isinstance(fn["description"], str):
        raise bad(f"{where}.function.description", "A function's 'description' must be a string.")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise bad(f"{where}.function.parameters", "A function's 'parameters' must be a JSON Schema object.")
    return tool


def _choice(value, names: list[str]) -> tuple[str, str | None]:
    if value is None:
        return ("auto" if names else "none"), None
    if value in ("none", "auto", "required"):
        if value == "required" and not names:
            raise bad("tool_choice", "'tool_choice' 'required' needs 'tools'.")
        return value, None
    fn = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                                  "{\"type\": \"function\", \"function\": {\"name\": ...}}.")
    if fn["name"] not in names:
        raise bad("tool_choice", f"'tool_choice' names the function {fn['name']!r}, which is not in 'tools'.")
    return "named", fn["name"]


def parse_tools(doc: dict) -> ToolsSpec | None:
    """`tools`, `tool_choice`, `parallel_tool_calls` -> ToolsSpec, or None without tools."""
    raw, choice = doc.get("tools"), doc.get("tool_choice")
    if raw is None and choice is None:
        return None
    if raw is not None and (not isinstance(raw, list) or len(raw) > MAX_TOOLS):
        raise bad("tools", f"'tools' must be a list of at most {MAX_TOOLS} function definitions.")
    tools = tuple(_tool(i, t) for i, t in enumerate(raw or ()))
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise bad("tools", "Function names in 'tools' must be unique.")
    mode, named = _choice(choice, names)
    parallel = doc.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean.")
    return ToolsSpec(tools, mode, named, parallel)


def check_tools_compile(cache: GrammarCache, spec: ToolsSpec) -> None:
    """Compile each function's parameters once (cached): a bad schema never reaches the engine."""
    for i, tool in enumerate(spec.tools):
        param = spec.parameters_at.format(i=i)
        try:
            cache.get(schema_spec(tool["function"].get("parameters", EMPTY_PARAMETERS)))
        except GrammarUnsupported as exc:
            raise ApiError("unsupported_parameter", f"{exc.message} (path {exc.path}, in '{param}').",
                           param=param) from None
        except GrammarInvalid as exc:
            raise bad(param, f"Invalid JSON Schema in '{param}': {exc.message}.") from None


def call_grammar_spec(spec: ToolsSpec) -> GrammarSpec | None:
    """`required` and a named function are enforced; `auto` lets the model write text or
    calls, but an answer that starts with the format's trigger must be valid calls (the
    grammar's auto form: a few ms to compile, cached); `none` leaves the model free."""
    if not spec.offered:
        return None
    names = [spec.named] if spec.choice == "named" else [t["function"]["name"] for t in spec.tools]
    # The arguments follow each schema's key order (a "reasoning" field first is first for
    # a reason), as `response_format` does.
    return tool_calls_spec([(name, spec.parameters(name)) for name in names], spec.fmt.syntax,
                           auto=spec.choice == "auto",
                           parallel=spec.parallel and spec.choice != "named" and spec.fmt.parallel_ok)


# --- the history: assistant calls and tool results -----------------------------------------------

def with_format(spec: ToolsSpec, fmt: ToolCallFormat) -> ToolsSpec:
    return replace(spec, fmt=fmt)


def call_arguments(where: str, value) -> dict:
    """Clients send `arguments` as JSON text; templates expect the object (vLLM parses it too)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            raise bad(where, f"'{where}' must be a JSON object (or its JSON text).") from None
    if not isinstance(value, dict):
        raise bad(where, f"'{where}' must be a JSON object (or its JSON text).")
    return value


def check_tool_calls(where: str, value) -> tuple[ToolCall, ...]:
    """An assistant message's `tool_calls` (even `[]`) -> the calls, arguments parsed."""
    if not isinstance(value, list):
        raise bad(where, f"'{where}' must be a list of tool calls.")
    calls = []
    for j, call in enumerate(value):
        at = f"{where}[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(at, f"'{at}' must be {{\"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}.")
        if call.get("id") is not None and not isinstance(call["id"], str):
            raise bad(f"{at}.id", f"'{at}.id' must be a string.")
        arguments = call_arguments(f"{at}.function.arguments", fn.get("arguments", "{}"))
        calls.append(ToolCall(fn["name"], arguments, call.get("id")))
    return tuple(calls)


def check_tool_message(where: str, message: dict) -> None:
    if message.get("tool_call_id") is not None and not isinstance(message["tool_call_id"], str):
        raise bad(f"{where}.tool_call_id", f"'{where}.tool_call_id' must be a string.")


def argument_fragments(arguments: str) -> list[str]:
    """A streamed call's arguments JSON in pieces (clients concatenate them: openai-python's
    stream helper does)."""
    return [arguments[at:at + ARG_FRAGMENT_CHARS]
            for at in range(0, len(arguments), ARG_FRAGMENT_CHARS)]
