"""What a request may ask for, compiled to a `Grammar`, and the cache that compiles it once.

`GrammarSpec` is the request's side (a frozen value the server builds): a JSON Schema, any
JSON object, a regex, a list of choices, tool calls in a given `CallSyntax`, or free text;
any of them after a model's free reasoning when `think` is set (thinking.py).
`compile_spec(spec, budget)` compiles it, every stage spending from one `WorkBudget`
(budget.py). `GrammarCache.get(spec)` compiles it once per canonical text (LRU-bounded) and
remembers a refusal like a success, so a schema that is too large or unsupported costs one
compile, not one per retry. The cache may be called from several threads (a lock guards its
dict; compiles run outside it, so two threads asking for one new spec at once may both
compile it, and the first result stored is the one kept). The compiled `Grammar` is
immutable and rides in the `GenRequest` to the engine thread.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Sequence

from engine.grammar import charset, expr as ex, jsontext as jt, regex_subset
from engine.grammar.automaton import Grammar, compile_grammar
from engine.grammar.budget import WorkBudget
from engine.grammar.errors import GrammarError, GrammarInvalid
from engine.grammar.json_schema import SchemaCompiler
from engine.grammar.keys import KeyRule
from engine.grammar.schema_dialect import canonical
from engine.grammar.thinking import ThinkPrefix, with_think_prefix

MAX_CACHED_GRAMMARS = 256
CHOICE_WORK = 4                 # budget units per character of a regex or a choice list
JSON_KINDS = ("json_schema", "json_object", "tool_calls")   # texts read by keys.py


@dataclass(frozen=True)
class CallSyntax:
    """The literal text around tool calls, as a grammar needs it (which model family writes
    it is the server's business): `prefix` once before all calls, `begin`/`end` around each
    call, the calls as one JSON array when `as_list`, each call's arguments under `args_key`.
    E.g. prefix="" begin="<tool_call>" end="</tool_call>": one tagged object per call."""
    prefix: str = ""
    begin: str = ""
    end: str = ""
    as_list: bool = False
    args_key: str = "arguments"

    @property
    def trigger(self) -> str:
        """The text that starts the calls (a bare JSON object when there are no markers)."""
        return self.prefix or self.begin or "{"


@dataclass(frozen=True)
class GrammarSpec:
    kind: str                   # json_schema | json_object | regex | choice | tool_calls | text
    text: str = ""              # canonical: schema JSON, the regex, the choices as JSON
    tools: tuple[tuple[str, str], ...] = ()   # tool_calls: (name, parameters schema JSON)
    call_syntax: CallSyntax | None = None     # tool_calls: the text around the calls
    parallel: bool = True       # tool_calls: more than one call
    auto: bool = False          # tool_calls: text or calls, the model chooses
    think: ThinkPrefix | None = None          # the model may think first (engine/grammar/thinking.py)

    @property
    def key(self) -> str:
        return json.dumps([self.kind, self.text, self.tools, repr(self.call_syntax), self.parallel,
                           self.auto, repr(self.think)])


def schema_spec(schema) -> GrammarSpec:
    return GrammarSpec("json_schema", canonical(schema))


def tool_calls_spec(tools: Sequence[tuple[str, Any]], syntax: CallSyntax, *, auto: bool,
                    parallel: bool) -> GrammarSpec:
    """The calls of `tools` ((name, parameters schema) pairs) in `syntax`: each schema's
    text keeps its keys in the schema's order, the order the arguments are written in."""
    return GrammarSpec("tool_calls", tools=tuple((name, canonical(params)) for name, params in tools),
                       call_syntax=syntax, auto=auto, parallel=parallel)


def compile_spec(spec: GrammarSpec, budget: WorkBudget | None = None) -> Grammar:
    """The spec's grammar, or `GrammarError`; all of its work is paid from `budget`."""
    try:
        return _compile(spec, budget if budget is not None else WorkBudget())
    except RecursionError:                          # a pattern or list nested past Python's stack
        raise GrammarInvalid("the schema or pattern is nested too deeply to compile") from None


def _compile(spec: GrammarSpec, budget: WorkBudget) -> Grammar:
    budget.spend(CHOICE_WORK * (len(spec.text) + sum(len(a) + len(b) for a, b in spec.tools)))
    if spec.kind == "text":
        # every byte sequence (a model may write bytes that are not UTF-8): allows everything,
        # the thinking too
        return compile_grammar({"root": ex.star(ex.chars(((0, 255),)))}, "root", spec.key, raw_bytes=True,
                               budget=budget)
    rules, root = _rules(spec, budget), "root"
    if spec.think is not None:
        rules, root = with_think_prefix(rules, root, spec.think)
    return replace(compile_grammar(rules, root, spec.key, budget=budget), keys=key_rule(spec))


def key_rule(spec: GrammarSpec) -> KeyRule | None:
    """Where the spec's text is JSON whose keys are written once per object (keys.py):
    a JSON grammar's from its start, a tool-call answer's from its trigger (under `auto`
    an answer without it is free text); after the reasoning when the model may think."""
    if spec.kind not in JSON_KINDS:
        return None
    trigger = spec.call_syntax.trigger if spec.kind == "tool_calls" and spec.auto else ""
    think = spec.think
    return KeyRule(trigger=trigger.encode(),
                   think_open=think.open.encode() if think else b"",
                   think_close=think.close.encode() if think else b"",
                   inside=think.starts_inside if think else False)


def _rules(spec: GrammarSpec, budget: WorkBudget) -> dict[str, tuple]:
    """The spec's named expressions, the answer's grammar under the name "root"."""
    if spec.kind == "regex":
        return {"root": regex_subset.full_match(spec.text)}
    if spec.kind == "choice":
        return {"root": ex.alt(*(ex.lit(c) for c in json.loads(spec.text)))}
    if spec.kind == "json_object":
        compiler = SchemaCompiler({"type": "object", "additionalProperties": True}, budget)
        compiler.rules["root"] = compiler.value({"type": "object", "additionalProperties": True}, "$")
        return compiler.rules
    if spec.kind == "json_schema":
        schema = json.loads(spec.text)
        compiler = SchemaCompiler(schema, budget)
        compiler.rules["root"] = compiler.value(schema, "$")
        return compiler.rules
    if spec.kind == "tool_calls":
        return _tool_calls(spec, budget)
    raise GrammarInvalid(f"unknown grammar kind {spec.kind!r}")


def _tool_calls(spec: GrammarSpec, budget: WorkBudget) -> dict[str, tuple]:
    fmt = spec.call_syntax
    compiler = SchemaCompiler({}, budget)
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
    many = ex.seq(one, ex.star(ex.seq(sep, one))) if spec.parallel else one
    body = ex.seq(ex.lit("["), many, ex.lit("]")) if fmt.as_list else many
    root = ex.seq(ex.lit(fmt.prefix), body)
    if spec.auto:
        root = ex.alt(root, ex.not_starting_with(fmt.trigger, ex.chars(charset.ANY)))
    compiler.rules["root"] = root
    return compiler.rules


class GrammarCache:
    """Compiled grammars and refusals by canonical text (LRU); safe to call from any thread."""

    def __init__(self, capacity: int = MAX_CACHED_GRAMMARS):
        self.capacity = capacity
        self._results: OrderedDict[str, Grammar | GrammarError] = OrderedDict()
        self._lock = threading.Lock()
        self.compiles = 0

    def get(self, spec: GrammarSpec) -> Grammar:
        """The spec's grammar; raises its `GrammarError` (the same one on every call)."""
        key = spec.key
        with self._lock:
            result = self._results.get(key)
            if result is not None:
                self._results.move_to_end(key)
        if result is None:
            try:
                result = compile_spec(spec)
            except GrammarError as refusal:
                result = refusal
            with self._lock:
                self.compiles += 1
                result = self._results.setdefault(key, result)
                if len(self._results) > self.capacity:
                    self._results.popitem(last=False)
        if isinstance(result, GrammarError):
            raise result.copy()
        return result
