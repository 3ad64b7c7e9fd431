"""The two special cases (prefix, spec) that bench/load_sweep.py runs with `--case`.

prefix: 16 requests sent in the same instant whose prompts share a cached ~400-token system
  prompt (warmed by one request first), each with its own ~25-token question, against the
  same questions behind a short cached system prompt: TTFT p50/max of each and the ratio
  (target <= 1.2x), alternating `--prefix-rounds` times with new questions each round. Then
  the cold case: 16 at once on a fresh 400-token prefix, with the server's prefix-cache
  counters (/metrics) before and after: computed once, each of the 15 followers reuses
  about the whole prefix.
spec: ordinary chat prompts and extractive ones ("repeat this passage word for word") at
  each concurrency, our server spawned once with speculative = "none" and once with
  "prompt_lookup": tok/s side by side and their ratio per cell.
"""
from __future__ import annotations

import json
import os
import random

from bench.load_client import rounded_percentile, run_load, summarize
from bench.load_server import HIT_COUNTER, PROMPT_COUNTER, WORDS, chat_body, chat_prompt

BURST = 16
PREFIX_WORDS = 375               # ~400 tokens on smol-135m
QUESTION_WORDS = 16              # ~25 tokens with "Question k:" and the template's turn markers
PREFIX_MAX_TOKENS = 8            # TTFT is the point; a few tokens prove the stream runs
SHORT_SYSTEM = "You are a helpful assistant."
TTFT_RATIO_TARGET = 1.2
SPEC_METHODS = ("none", "prompt_lookup")
SPEC_CELL_STRIDE = 100_000       # prompts of a (kind, streams) cell: the same under both methods
PASSAGE = ("The old bakery on the corner opened before sunrise every day of the year. The "
           "baker lit the oven, weighed the flour and shaped the loaves by hand, and by six "
           "o'clock the whole street smelled of bread. Fishermen bought rolls on their way to "
           "the harbour, children bought buns on their way to school, and in the evening the "
           "baker gave what was left to the shelter by the church.")


def long_system(seed: str) -> str:
    rng = random.Random(seed)
    notes = " ".join(rng.choice(WORDS) for _ in range(PREFIX_WORDS))
    return f"You are the archivist of a coastal town. Background notes: {notes}."


def question(k: int) -> str:
    rng = random.Random(f"question-{k}")
    return f"Question {k}: what links " + " ".join(rng.choice(WORDS) for _ in range(QUESTION_WORDS)) + "?"


def burst(endpoint, system: str, questions: list[str]) -> list:
    """All questions sent at once, one connection each; their records."""
    def body(i: int) -> bytes:
        return chat_body(endpoint.model, questions[i], PREFIX_MAX_TOKENS, system=system)
    return run_load(endpoint.target, body, len(questions), requests=len(questions)).records


def ttft_s(records: list) -> list[float]:
    return [r.event_s[0] - r.sent_s for r in records if r.event_s]


def _ttft_row(name: str, values: list[float], records: list) -> dict:
    return {"case": f"prefix_{name}", "requests": len(records),
            "ok": sum(r.ok for r in records), "ttft_p50_s": rounded_percentile(values, 50),
            "ttft_max_s": rounded_percentile(values, 100),
            "prompt_tokens": max((r.prompt_tokens for r in records), default=0)}


def prefix_case(args, open_server) -> None:
    with open_server(args, []) as (endpoint, server):
        cached = long_system("prefix-cached")
        for system in (cached, SHORT_SYSTEM):                       # warm both prefixes
            burst(endpoint, system, [question(-1)])
        runs = {"long": [], "short": []}
        for rnd in range(args.prefix_rounds):
            questions = [question(rnd * BURST + k) for k in range(BURST)]
            runs["short"] += burst(endpoint, SHORT_SYSTEM, questions)
            endpoint.settle(server)
            runs["long"] += burst(endpoint, cached, questions)
            endpoint.settle(server)
        rows = [_ttft_row(f"{name}_cached", ttft_s(records), records)
                for name, records in runs.items()]
        long_s, short_s = rows[0]["ttft_p50_s"], rows[1]["ttft_p50_s"]
        ratio = long_s / short_s if long_s and short_s else float("nan")
        rows.append({"case": "prefix_ratio", "long_over_short_ttft_p50": round(ratio, 3),
                     "target": TTFT_RATIO_TARGET})
        before = endpoint.metrics()
        cold = burst(endpoint, long_system(f"prefix-cold-{os.getpid()}"),
                     [question(10_000 + k) for k in range(BURST)])
        after = endpoint.metrics()
        row = _ttft_row("cold", ttft_s(cold), cold)
        if before:
            hits = after[HIT_COUNTER] - before[HIT_COUNTER]
            row.update(hit_tokens=hits, looked_up_tokens=after[PROMPT_COUNTER] - before[PROMPT_COUNTER],
                       hit_tokens_per_follower=round(hits / (BURST - 1), 1))
        rows.append(row)
    print(f"{'case':<22}{'ok':>4}{'TTFT p50':>10}{'TTFT max':>10}{'prompt tok':>11}")
    for r in rows:
        if "ttft_p50_s" in r:
            print(f"{r['case']:<22}{r['ok']:>4}{r['ttft_p50_s']!s:>10}{r['ttft_max_s']!s:>10}"
                  f"{r['prompt_tokens']:>11}")
    print(f"cached long / short TTFT p50: {ratio:.2f}x (target <= {TTFT_RATIO_TARGET}x)")
    if "hit_tokens" in row:
        print(f"cold burst: {row['hit_tokens']:.0f} of {row['looked_up_tokens']:.0f} prompt tokens "
              f"from the prefix cache, {row['hit_tokens_per_follower']} per follower (computed "
              f"once: about the whole prefix of each {row['prompt_tokens']}-token prompt)")
    for r in rows:
        print(json.dumps(r))


def extractive_prompt(i: int) -> str:
    return f"Request {i}. Repeat this passage word for word:\n\n{PASSAGE}"


def spec_case(args, open_server) -> None:
    levels = [int(x) for x in args.concurrency.split(",")]
    kinds = {"chat": chat_prompt, "extractive": extractive_prompt}
    cells: dict[tuple[str, int], dict[str, dict]] = {}
    for method in SPEC_METHODS:
        with open_server(args, [f"speculative={method}"]) as (endpoint, server):
            for k, (kind, prompt) in enumerate(kinds.items()):
                for streams in levels:
                    base = (k * len(levels) + levels.index(streams)) * SPEC_CELL_STRIDE
                    def body(i: int, base=base, prompt=prompt) -> bytes:
                        return chat_body(endpoint.model, prompt(base + i), args.max_tokens,
                                         ignore_eos=args.ignore_eos)
                    summary = summarize(run_load(endpoint.target, body, streams,
                                                 warmup_s=args.warmup_s,
                                                 duration_s=args.duration_s,
                                                 requests=args.requests))
                    cells.setdefault((kind, streams), {})[method] = summary
                    endpoint.settle(server)
    rows = []
    print(f"{'prompts':<12}{'streams':>8}{'tok/s none':>12}{'tok/s lookup':>14}{'ratio':>8}"
          f"{'ITL p99 none':>14}{'ITL p99 lookup':>16}")
    for (kind, streams), by in cells.items():
        off, on = by["none"], by["prompt_lookup"]
        ratio = on["tok_s"] / off["tok_s"] if off["tok_s"] else float("nan")
        print(f"{kind:<12}{streams:>8}{off['tok_s']:>12}{on['tok_s']:>14}{ratio:>8.3f}"
              f"{off['itl_p99_s']!s:>14}{on['itl_p99_s']!s:>16}")
        rows.append({"case": "spec", "prompts": kind, "streams": streams,
                     "lookup_over_none": round(ratio, 3), "none": off, "prompt_lookup": on})
    for r in rows:
        print(json.dumps(r))
