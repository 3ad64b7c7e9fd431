"""Grammar-forced drafts on smol-135m's vocabulary: what they cost per call and how much of a
structured answer they cover (the grammar draft source, engine/grammar/forced.py).

Each case walks a plausible answer's tokens (the tokenizer's encoding of it) through a fresh
constraint the way speculation would: at each position ask `forced_drafts(K)`, count the
drafts that equal the answer's next tokens (accepted), then advance past them and one token
the model writes. Covered = accepted drafts / answer tokens; steps = decode steps needed
(accepted drafts ride in the same step as the model's token). The real model need not split
its text like the tokenizer does; where it differs, fewer drafts are accepted.

Per-call cost: `forced_drafts` at every state of the answer, cold (a fresh grammar: each
state's text, encoding and checks built once; the automaton's steps already memoised by the
walk that found the states) and warm (the cache shared by all sequences): mean and max.

Cases: extract: a support ticket schema as pydantic writes it (9 fields, four enums, two
nested objects: bench/spec_tasks.py's task b), the answer compact (json.dumps' default);
extract2: the same answer indented by 2, as smol-135m lays out JSON when greedy; tool: a
Hermes `<tool_call>` of get_weather with two tools offered (task c).

Usage:   python bench/grammar_drafts.py          # K = 8 drafts a step at most (--k)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.api import load_model                                     # noqa: E402
from engine.grammar.compile import CallSyntax, GrammarCache, GrammarSpec, schema_spec  # noqa: E402
from engine.grammar.constraint import Guides                          # noqa: E402

MODEL = ROOT / "artifacts" / "models" / "smol-135m"
WARM_REPEATS = 200              # passes over the answer's states for the warm per-call time


def _enum(title: str, values: list[str]) -> dict:
    return {"enum": values, "title": title, "type": "string"}


def _object(title: str, properties: dict) -> dict:
    return {"additionalProperties": False, "properties": properties, "required": list(properties),
            "title": title, "type": "object"}


TICKET_SCHEMA = {   # SupportTicket.model_json_schema() with extra="forbid": $defs, $ref, enums
    "$defs": {
        "Plan": _enum("Plan", ["free", "pro", "enterprise"]),
        "Category": _enum("Category", ["billing", "bug", "feature_request", "account", "outage"]),
        "Priority": _enum("Priority", ["low", "medium", "high", "urgent"]),
        "Sentiment": _enum("Sentiment", ["positive", "neutral", "negative"]),
        "Customer": _object("Customer", {"name": {"title": "Name", "type": "string"},
                                         "email": {"title": "Email", "type": "string"},
                                         "plan": {"$ref": "#/$defs/Plan"}}),
        "OrderRef": _object("OrderRef", {"order_id": {"title": "Order Id", "type": "string"},
                                         "amount_eur": {"title": "Amount Eur", "type": "number"}})},
    **_object("SupportTicket", {
        "customer": {"$ref": "#/$defs/Customer"}, "category": {"$ref": "#/$defs/Category"},
        "priority": {"$ref": "#/$defs/Priority"}, "sentiment": {"$ref": "#/$defs/Sentiment"},
        "product_area": {"description": "the part of the product the e-mail is about",
                         "title": "Product Area", "type": "string"},
        "summary": {"description": "one sentence", "title": "Summary", "type": "string"},
        "affected_users": {"title": "Affected Users", "type": "integer"},
        "order": {"$ref": "#/$defs/OrderRef"},
        "requested_action": {"title": "Requested Action", "type": "string"}})}
TICKET_ANSWER = json.dumps({
    "customer": {"name": "Maria Lindqvist", "email": "maria.lindqvist@northwind.example", "plan": "pro"},
    "category": "billing", "priority": "high", "sentiment": "negative", "product_area": "billing",
    "summary": "The customer was charged twice for order NW-20931 and wants a refund.",
    "affected_users": 1, "order": {"order_id": "NW-20931", "amount_eur": 49.0},
    "requested_action": "Refund the second charge before the end of the month."})

WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"],
        "additionalProperties": False}
TOOL_SPEC = GrammarSpec("tool_calls", tools=(("get_weather", json.dumps(WEATHER)), ("get_time", json.dumps(TIME))),
                        call_syntax=CallSyntax(begin="<tool_call>", end="</tool_call>"))
TOOL_ANSWER = '<tool_call>{"name": "get_weather", "arguments": {"city": "Lisbon", "unit": "celsius"}}</tool_call>'


def walk(guides: Guides, grammar, ids: list[int], k: int) -> tuple[int, int]:
    """Speculate over `ids` with up to `k` drafts per step -> (accepted drafts, steps)."""
    constraint, pos, accepted, steps = guides.constraint(grammar), 0, 0, 0
    while pos < len(ids):
        drafts = constraint.forced_drafts(k)
        n = 0
        while n < len(drafts) and pos + n < len(ids) and drafts[n] == ids[pos + n]:
            n += 1
        for token in ids[pos:pos + n + 1]:          # the accepted drafts and the model's token
            assert constraint.allows(token), token
            constraint.advance(token)
        accepted, pos, steps = accepted + n, pos + n + 1, steps + 1
    return accepted, steps


def call_times_us(guides: Guides, grammar, ids: list[int], k: int, repeats: int) -> list[float]:
    """Microseconds of each `forced_drafts(k)` at the answer's states (the mean of `repeats`)."""
    constraint = guides.constraint(grammar)
    states = []
    for token in ids:
        states.append((constraint.state, constraint.view))
        constraint.advance(token)
    times = [0.0] * len(states)
    for _ in range(repeats):
        for i, (constraint.state, constraint.view) in enumerate(states):
            start = time.perf_counter()
            constraint.forced_drafts(k)
            times[i] += (time.perf_counter() - start) * 1e6 / repeats
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=8, help="drafts per step at most")
    args = parser.parse_args()
    tokenizer = load_model(str(MODEL)).tokenizer
    indented = json.dumps(json.loads(TICKET_ANSWER), indent=2)      # smol-135m's own layout, greedy
    for name, spec, answer in (("extract", schema_spec(TICKET_SCHEMA), TICKET_ANSWER),
                               ("extract2", schema_spec(TICKET_SCHEMA), indented),
                               ("tool", TOOL_SPEC, TOOL_ANSWER)):
        guides = Guides(tokenizer, tokenizer.vocab_size, tokenizer.eos_token_ids)
        guides.table                                            # built once per process: not timed
        grammar, ids = GrammarCache().get(spec), tokenizer.encode(answer)
        cold = call_times_us(guides, grammar, ids, args.k, 1)
        warm = call_times_us(guides, grammar, ids, args.k, WARM_REPEATS)
        accepted, steps = walk(guides, grammar, ids, args.k)
        print(f"{name:8s} tokens {len(ids):4d}  covered {accepted:4d} ({accepted / len(ids):5.1%})  "
              f"steps {steps:4d} ({len(ids) / steps:4.2f} tokens/step)  per call: cold mean "
              f"{sum(cold) / len(cold):6.1f} us max {max(cold):6.1f} us, warm mean {sum(warm) / len(warm):5.2f} us "
              f"max {max(warm):5.2f} us")


if __name__ == "__main__":
    main()
