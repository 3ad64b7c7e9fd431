"""A grammar that lets the model think first: free text between `<think>` and `</think>`,
then the request's own grammar.

Templates that think (Qwen3, DeepSeek-R1) make the model write its reasoning before the
answer; a JSON schema or a tool-call grammar applied from the first token would forbid it.
So a `ThinkPrefix` wraps the request's rules in front (the grammar is still one automaton,
compiled once and cached like any other):

    root  :=  WS* open  free(close)  close  "\n"*  answer    |  answer      (thinking is optional)
    root  :=            free(close)  close  "\n"*  answer                   (starts_inside: the
                                                                             prompt opened the tag)

`free(close)` is any text that does not contain `close`: one rule per prefix of `close`
matched so far (the Knuth-Morris-Pratt states), each step a tail call, so the reasoning
costs no stack however long it is. The newlines after the tag are the ones the server's
splitter drops (server/text/reasoning.py), so the answer it returns is exactly what the
request's grammar accepted.

Cost: inside the reasoning nearly every token is allowed, so greedy and plain temperature
sampling never build a mask there (guided.py keeps the sampled token); with filters or
logprobs a mask is built once per automaton state and cached (measured over Qwen3's 151,669
tokens: 110 ms for the free state, 0.006 ms when cached); reasoning that splits many
multi-byte characters across tokens visits more states (the held UTF-8 bytes are part of a
state), each one build.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.grammar import charset, expr as ex

THINK_RULE = "__think_{}"       # one rule per matched prefix of the closing tag
THINK_ROOT = "__think_root"
LEADING_SPACE = charset.chars(" \t\r\n")


@dataclass(frozen=True)
class ThinkPrefix:
    """The two tags around the reasoning (the server's text layer knows which a family
    writes: server/text/reasoning.py); `starts_inside`: the prompt already opened it."""
    open: str
    close: str
    starts_inside: bool = False


def _next_state(close: str, matched: int, ch: str) -> int:
    """How much of `close` is matched after `ch` follows `matched` characters of it."""
    text = close[:matched] + ch
    for length in range(min(len(text), len(close)), 0, -1):
        if text.endswith(close[:length]):
            return length
    return 0


def _free_rules(close: str, answer: ex.Expr) -> dict[str, ex.Expr]:
    """Rules THINK_RULE.format(i): i characters of `close` matched; `close` whole -> answer."""
    tag_chars = sorted(set(close))
    other = ex.chars(charset.minus(charset.ANY, charset.chars("".join(tag_chars))))
    rules = {}
    for matched in range(len(close)):
        branches = [ex.seq(other, ex.ref(THINK_RULE.format(0)))]
        for ch in tag_chars:
            nxt = _next_state(close, matched, ch)
            then = answer if nxt == len(close) else ex.ref(THINK_RULE.format(nxt))
            branches.append(ex.seq(ex.lit(ch), then))
        rules[THINK_RULE.format(matched)] = ex.alt(*branches)
    return rules


def with_think_prefix(rules: dict[str, ex.Expr], root: str,
                      think: ThinkPrefix) -> tuple[dict[str, ex.Expr], str]:
    """`rules` with the thinking prefix in front of `root`: (the rules, the new root's name)."""
    answer = ex.seq(ex.star(ex.lit("\n")), ex.ref(root))
    out = {**rules, **_free_rules(think.close, answer)}
    thinking = ex.ref(THINK_RULE.format(0))
    if not think.starts_inside:
        opened = ex.seq(ex.star(ex.chars(LEADING_SPACE)), ex.lit(think.open), thinking)
        thinking = ex.alt(opened, ex.ref(root))
    out[THINK_ROOT] = thinking
    return out, THINK_ROOT
