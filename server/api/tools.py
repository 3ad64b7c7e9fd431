"""Tool calling at the API edge: `tools`, `tool_choice`, `parallel_tool_calls`, the tool
history in `messages`, the family's call format, and the grammar that enforces a call.

    tools:        [{"type": "function", "function": {"name", "description"?, "parameters"?}}]
    tool_choice:  "none" (no tools offered) | "auto" (the model chooses text or calls; a
                  call, once started, is grammar-constrained; the default with tools) |
                  "required" (at least one call, grammar-enforced) |
                  {"type": "function", "function": {"name": ...}} (that call, enforced)
    parallel_tool_calls: bool (default true): more than one call in an answer

The format is chosen once per template (`tool_format`): Hermes/Qwen `<tool_call>`, Mistral
`[TOOL_CALLS]`, Granite `<|tool_call|>`, Llama 3.1 bare JSON. A template that never reads
`tools` (SmolLM2's) gets the Hermes format and `DEFAULT_TOOL_PROMPT` in its system turn.
Every function's `parameters` compiles through the grammar cache at validation, whatever the
choice: an invalid schema is a 400 and an unserved keyword a 422, both naming the tool.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from engine.api import GrammarCache, GrammarInvalid, GrammarSpec, GrammarUnsupported, ToolCallFormat, schema_spec
from server.errors import ApiError

MAX_TOOLS = 128
HERMES = ToolCallFormat("hermes", begin="<tool_call>", end="</tool_call>")
MISTRAL = ToolCallFormat("mistral", prefix="[TOOL_CALLS]", as_list=True)
GRANITE = ToolCallFormat("granite", prefix="<|tool_call|>", as_list=True)
LLAMA3_JSON = ToolCallFormat("llama3_json", args_key="parameters", parallel_ok=False)
# template text that names the family's call syntax -> its format (first match wins)
FORMAT_MARKERS = (("[TOOL_CALLS]", MISTRAL), ("<|tool_call|>", GRANITE), ("<tool_call>", HERMES),
                  ('"parameters": dictionary', LLAMA3_JSON), ("<|python_tag|>", LLAMA3_JSON))
EMPTY_PARAMETERS = {"type": "object", "properties": {}}
DEFAULT_TOOL_PROMPT = (
    "You can call functions. Their signatures (JSON Schema) are listed within <tools></tools>:\n"
    "<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with one line per call, exactly in this form:\n"
    '<tool_call>{{"name": <function-name>, "arguments": <arguments-json-object>}}</tool_call>')


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

    def parameters(self, name: str) -> dict:
        return next(t["function"].get("parameters", EMPTY_PARAMETERS) for t in self.tools
                    if t["function"]["name"] == name)


def _bad(param: str, message: str) -> ApiError:
    return ApiError("invalid_request", message, param=param)


def _tool(i: int, tool) -> dict:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        raise _bad(where, f"'{where}' must be {{\"type\": \"function\", \"function\": {{...}}}}.")
    fn = tool["function"]
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise _bad(f"{where}.function.name", f"'{where}.function.name' must be a non-empty string.")
    if fn.get("description") is not None and not isinstance(fn["description"], str):
        raise _bad(f"{where}.function.description", "A function's 'description' must be a string.")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise _bad(f"{where}.function.parameters", "A function's 'parameters' must be a JSON Schema object.")
    return tool


def _choice(value, names: list[str]) -> tuple[str, str | None]:
    if value is None:
        return ("auto" if names else "none"), None
    if value in ("none", "auto", "required"):
        if value == "required" and not names:
            raise _bad("tool_choice", "'tool_choice' 'required' needs 'tools'.")
        return value, None
    fn = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise _bad("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                                  "{\"type\": \"function\", \"function\": {\"name\": ...}}.")
    if fn["name"] not in names:
        raise _bad("tool_choice", f"'tool_choice' names the function {fn['name']!r}, which is not in 'tools'.")
    return "named", fn["name"]


def parse_tools(doc: dict) -> ToolsSpec | None:
    """`tools`, `tool_choice`, `parallel_tool_calls` -> ToolsSpec, or None without tools."""
    raw, choice = doc.get("tools"), doc.get("tool_choice")
    if raw is None and choice is None:
        return None
    if raw is not None and (not isinstance(raw, list) or len(raw) > MAX_TOOLS):
        raise _bad("tools", f"'tools' must be a list of at most {MAX_TOOLS} function definitions.")
    tools = tuple(_tool(i, t) for i, t in enumerate(raw or ()))
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise _bad("tools", "Function names in 'tools' must be unique.")
    mode, named = _choice(choice, names)
    parallel = doc.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise _bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean.")
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
            raise _bad(param, f"Invalid JSON Schema in '{param}': {exc.message}.") from None


def call_grammar_spec(spec: ToolsSpec) -> GrammarSpec | None:
    """`required` and a named function are enforced; `auto` lets the model write text or
    calls, but an answer that starts with the format's trigger must be valid calls (the
    grammar's auto form: a few ms to compile, cached); `none` leaves the model free."""
    if not spec.offered:
        return None
    names = [spec.named] if spec.choice == "named" else [t["function"]["name"] for t in spec.tools]
    tools = tuple((name, json.dumps(spec.parameters(name), sort_keys=True)) for name in names)
    return GrammarSpec("tool_calls", tools=tools, tool_format=spec.fmt, auto=spec.choice == "auto",
                       parallel=spec.parallel and spec.choice != "named")


# --- the template side ---------------------------------------------------------------------------

def tool_format(template_source: str, reads_tools: bool) -> ToolCallFormat:
    """The call format of the template's family; Hermes when the template ignores tools."""
    if reads_tools:
        for marker, fmt in FORMAT_MARKERS:
            if marker in template_source:
                return fmt
    return HERMES


def with_format(spec: ToolsSpec, fmt: ToolCallFormat) -> ToolsSpec:
    return replace(spec, fmt=fmt)


def default_tool_prompt(tools: tuple[dict, ...]) -> str:
    listed = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    return DEFAULT_TOOL_PROMPT.format(tools=listed)


def hermes_text(tool_calls: list) -> str:
    """An assistant turn's calls in the default format (templates that ignore `tool_calls`)."""
    return "\n".join("<tool_call>" + json.dumps({"name": c["function"]["name"],
                                                 "arguments": c["function"]["arguments"]},
                                                ensure_ascii=False) + "</tool_call>" for c in tool_calls)


def with_default_prompt(messages: list[dict], tools: tuple[dict, ...]) -> list[dict]:
    """Templates that ignore tools: the prompt joins the system turn (a new one if none), and
    the history's calls are written into the assistant text in the Hermes format."""
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            text = m.get("content") or ""
            m = dict(m, content=(text + "\n" if text else "") + hermes_text(m["tool_calls"]))
        out.append(m)
    if not tools:
        return out
    prompt = default_tool_prompt(tools)
    if out and out[0]["role"] == "system" and isinstance(out[0].get("content"), str):
        return [dict(out[0], content=out[0]["content"] + "\n\n" + prompt)] + out[1:]
    return [{"role": "system", "content": prompt}] + out


# --- the history: assistant calls and tool results -----------------------------------------------

def call_arguments(where: str, value) -> dict:
    """Clients send `arguments` as JSON text; templates expect the object (vLLM parses it too)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            raise _bad(where, f"'{where}' must be a JSON object (or its JSON text).") from None
    if not isinstance(value, dict):
        raise _bad(where, f"'{where}' must be a JSON object (or its JSON text).")
    return value


def check_tool_calls(where: str, value) -> list[dict]:
    """An assistant message's `tool_calls` (even `[]`) -> the calls, arguments parsed."""
    if not isinstance(value, list):
        raise _bad(where, f"'{where}' must be a list of tool calls.")
    calls = []
    for j, call in enumerate(value):
        at = f"{where}[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _bad(at, f"'{at}' must be {{\"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}.")
        if call.get("id") is not None and not isinstance(call["id"], str):
            raise _bad(f"{at}.id", f"'{at}.id' must be a string.")
        arguments = call_arguments(f"{at}.function.arguments", fn.get("arguments", "{}"))
        calls.append(dict(call, type="function", function=dict(fn, arguments=arguments)))
    return calls


def check_tool_message(where: str, message: dict) -> None:
    if message.get("tool_call_id") is not None and not isinstance(message["tool_call_id"], str):
        raise _bad(f"{where}.tool_call_id", f"'{where}.tool_call_id' must be a string.")
