"""Tool-call formats: how a model family writes its calls, chosen once from its template.

    Hermes/Qwen   <tool_call>{"name": .., "arguments": {..}}</tool_call>   (one tag per call)
    Mistral       [TOOL_CALLS][{..}, {..}]
    Granite       <|tool_call|>[{..}]
    Llama 3.1     {"name": .., "parameters": {..}}                          (one bare object)

`tool_format(template_source, reads_tools)` picks the format by the markers its template
names; a template that never reads `tools` (SmolLM2's) gets Hermes, the default tool prompt
in its system turn and its history's calls written as Hermes text (`with_default_prompt`).
The engine's grammar gets only a format's `CallSyntax` (the literal text), never its name.
Parsing the model's call text is server/text/toolparse.py.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from engine.api import CallSyntax


@dataclass(frozen=True)
class ToolCallFormat:
    """A model family's call syntax, named; `parallel_ok`: it can carry more than one call."""
    name: str
    prefix: str = ""            # once, before all calls
    as_list: bool = False       # the calls are one JSON array
    begin: str = ""             # around each call
    end: str = ""
    args_key: str = "arguments"
    parallel_ok: bool = True

    @property
    def syntax(self) -> CallSyntax:
        """What the engine's grammar needs of the format: its literal text."""
        return CallSyntax(prefix=self.prefix, begin=self.begin, end=self.end,
                          as_list=self.as_list, args_key=self.args_key)

    @property
    def trigger(self) -> str:
        """The text that starts the calls; "{" for bare JSON (the answer's first character)."""
        return self.syntax.trigger


HERMES = ToolCallFormat("hermes", begin="<tool_call>", end="</tool_call>")
MISTRAL = ToolCallFormat("mistral", prefix="[TOOL_CALLS]", as_list=True)
GRANITE = ToolCallFormat("granite", prefix="<|tool_call|>", as_list=True)
LLAMA3_JSON = ToolCallFormat("llama3_json", args_key="parameters", parallel_ok=False)
# template text that names the family's call syntax -> its format (first match wins)
FORMAT_MARKERS = (("[TOOL_CALLS]", MISTRAL), ("<|tool_call|>", GRANITE), ("<tool_call>", HERMES),
                  ('"parameters": dictionary', LLAMA3_JSON), ("<|python_tag|>", LLAMA3_JSON))
DEFAULT_TOOL_PROMPT = (
    "You can call functions. Their signatures (JSON Schema) are listed within <tools></tools>:\n"
    "<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with one line per call, exactly in this form:\n"
    '<tool_call>{{"name": <function-name>, "arguments": <arguments-json-object>}}</tool_call>')


def tool_format(template_source: str, reads_tools: bool) -> ToolCallFormat:
    """The call format of the template's family; Hermes when the template ignores tools."""
    if reads_tools:
        for marker, fmt in FORMAT_MARKERS:
            if marker in template_source:
                return fmt
    return HERMES


def default_tool_prompt(tools: tuple[dict, ...]) -> str:
    listed = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    return DEFAULT_TOOL_PROMPT.format(tools=listed)


def hermes_text(tool_calls: list[dict]) -> str:
    """An assistant turn's calls in the default format (templates that ignore `tool_calls`)."""
    return "\n".join("<tool_call>" + json.dumps({"name": c["function"]["name"],
                                                 "arguments": c["function"]["arguments"]},
                                                ensure_ascii=False) + "</tool_call>"
                     for c in tool_calls)


def with_default_prompt(prepared: list[dict], tools: tuple[dict, ...]) -> list[dict]:
    """Templates that ignore tools, on the template's values (server/text/messages.py's
    `for_template` made them, so they are changed in place): the history's calls are written
    into the assistant text in the Hermes format, and the prompt joins the system turn (a new
    one if none)."""
    for m in prepared:
        if m["role"] == "assistant" and m.get("tool_calls"):
            text = m.get("content") or ""
            m["content"] = (text + "\n" if text else "") + hermes_text(m["tool_calls"])
    if not tools:
        return prepared
    prompt = default_tool_prompt(tools)
    if prepared and prepared[0]["role"] == "system" and isinstance(prepared[0].get("content"), str):
        prepared[0]["content"] += "\n\n" + prompt
        return prepared
    return [{"role": "system", "content": prompt}] + prepared
