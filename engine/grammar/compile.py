"""What a request may ask for, compiled to a `Grammar`, and the cache that compiles it once.

`GrammarSpec` is the request's side (a frozen value the server builds): a JSON Schema, any
JSON object, a regex, a list of choices, tool calls in a family's format, or free text.
`GrammarCache.get(spec)` compiles it at most once per canonical text (LRU-bounded); the
compiled `Grammar` is immutable and rides in the `GenRequest` to the engine thread.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass

from engine.grammar import charset, expr as ex, jsontext as jt, regex_subset
from engine.grammar.automaton import Grammar, compile_grammar
from engine.grammar.errors import GrammarInvalid
from engine.grammar.json_schema import SchemaCompiler, canonical

MAX_CACHED_GRAMMARS = 256


@dataclass(frozen=True)
class ToolCallFormat:
    """How a model family writes tool calls.

    Hermes/Qwen: `<tool_call>{"name": .., "arguments": ..}</tool_call>` per call;
    Mistral: `[TOOL_CALLS][{..}, {..}]`; Granite: `<|tool_call|>[{..}]`; Llama 3.1: one bare
    `{"name": .., "parameters": ..}`."""
    name: str
    prefix: str = ""            # once, before all calls
    as_list: bool = False       # the calls are one JSON array
    begin: str = ""             # around each call
    end: str = ""
    args_key: str = "arguments"
    parallel_ok: bool = True    # the format can carry more than one call


@dataclass(frozen=True)
class GrammarSpec:
    kind: str                   # json_schema | json_object | regex | choice | tool_calls | text
    text: str = ""              # canonical: schema JSON, the regex, the choices as JSON
    tools: tuple[tuple[str, str], ...] = ()   # tool_calls: (name, parameters schema JSON)
    tool_format: ToolCallFormat | None = None
    parallel: bool = True
    auto: bool = False          # tool_calls: text or calls, the model chooses

    @property
    def key(self) -> str:
        return json.dumps([self.kind, self.text, self.tools, repr(self.tool_format), self.parallel,
                           self.auto])


def schema_spec(schema) -> GrammarSpec:
    return GrammarSpec("json_schema", canonical(schema))


def _compile(spec: GrammarSpec) -> Grammar:
    if spec.kind == "text":
        # every byte sequence (a model may write bytes that are not UTF-8): allows everything
        return compile_grammar({"root": ex.star(ex.chars(((0, 255),)))}, "root", spec.key, raw_bytes=True)
    if spec.kind == "regex":
        return compile_grammar({"root": regex_subset.full_match(spec.text)}, "root", spec.key)
    if spec.kind == "choice":
        return compile_grammar({"root": ex.alt(*(ex.lit(c) for c in json.loads(spec.text)))}, "root", spec.key)
    if spec.kind == "json_object":
        compiler = SchemaCompiler({"type": "object", "additionalProperties": True})
        compiler.rules["root"] = compiler.value({"type": "object", "additionalProperties": True}, "$")
        return compile_grammar(compiler.rules, "root", spec.key)
    if spec.kind == "json_schema":
        schema = json.loads(spec.text)
        compiler = SchemaCompiler(schema)
        compiler.rules["root"] = compiler.value(schema, "$")
        return compile_grammar(compiler.rules, "root", spec.key)
    if spec.kind == "tool_calls":
        return _tool_calls(spec)
    raise GrammarInvalid(f"unknown grammar kind {spec.kind!r}")


def _tool_calls(spec: GrammarSpec) -> Grammar:
    fmt = spec.tool_format
    compiler = SchemaCompiler({})
    calls = []
    for name, params_text in spec.tools:
        params = json.loads(params_text)
        compiler.root = params
        args = compiler.value(params, f"$.tools[{name}].parameters")
        calls.append(ex.seq(ex.lit("{"), jt.WS, jt.literal("name"), jt.WS, ex.lit(":"), jt.WS, jt.literal(name),
                            jt.WS, ex.lit(","), jt.WS, jt.literal(fmt.args_key), jt.WS, ex.lit(":"), jt.WS,
                            args, jt.WS, ex.lit("}")))
    one = ex.seq(ex.lit(fmt.begin), ex.alt(*calls), ex.lit(fmt.end))
    sep = ex.seq(jt.WS, ex.lit(","), jt.WS) if fmt.as_list else jt.WS
    many = ex.seq(one, ex.star(ex.seq(sep, one))) if spec.parallel and fmt.parallel_ok else one
    body = ex.seq(ex.lit("["), many, ex.lit("]")) if fmt.as_list else many
    root = ex.seq(ex.lit(fmt.prefix), body)
    if spec.auto:
        trigger = fmt.prefix or fmt.begin or "{"
        root = ex.alt(root, ex.not_starting_with(trigger, ex.chars(charset.ANY)))
    compiler.rules["root"] = root
    return compile_grammar(compiler.rules, "root", spec.key)


class GrammarCache:
    """Compiled grammars by canonical text (LRU). Used on the server's loop thread."""

    def __init__(self, capacity: int = MAX_CACHED_GRAMMARS):
        self.capacity = capacity
        self._grammars: OrderedDict[str, Grammar] = OrderedDict()
        self.compiles = 0

    def get(self, spec: GrammarSpec) -> Grammar:
        key = spec.key
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = _compile(spec)
            self.compiles += 1
            self._grammars[key] = grammar
            if len(self._grammars) > self.capacity:
                self._grammars.popitem(last=False)
        else:
            self._grammars.move_to_end(key)
        return grammar
