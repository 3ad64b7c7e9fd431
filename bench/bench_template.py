"""Benchmark the chat-template compiler: render and parse times.

Cases:
- render_smollm2_20_messages: median time to render SmolLM2's template over a 20-message
  conversation (target <= 1 ms).
- parse_largest_oracle_template: median time to parse (lex + parse + compile) the largest
  template in the oracle (target <= 20 ms).
- render_largest_oracle_template: median time to render that template over a tool-call
  conversation (informational).

Prints a table, then one JSON line per case. Run: python bench/bench_template.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from template import Template  # noqa: E402

ORACLE = REPO / ".." / "shared" / "oracle" / "template_cases.jsonl"
NUM_REPEATS = 200


def median_ms(fn, repeats: int = NUM_REPEATS) -> float:
    for _ in range(5):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(samples)


def main() -> None:
    cases = [json.loads(line) for line in ORACLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    smol = next(c for c in cases if c["template_name"] == "SmolLM2-135M-Instruct")["template_source"]
    largest = max(cases, key=lambda c: len(c["template_source"]))
    big_case = next((c for c in cases if c["template_source"] == largest["template_source"]
                     and c["case"] == "tool_call_roundtrip" and c["error"] is None), largest)
    roles = ["user", "assistant"]
    conversation = [{"role": roles[i % 2], "content": f"Message number {i}: " + "some words " * 20} for i in range(20)]
    smol_template = Template.parse(smol)
    big_template = Template.parse(largest["template_source"])
    now = datetime(2024, 7, 26, 12)

    results = [
        {"case": "render_smollm2_20_messages", "median_ms": median_ms(lambda: smol_template.render_chat(conversation)),
         "target_ms": 1.0, "template_chars": len(smol)},
        {"case": "parse_largest_oracle_template", "median_ms": median_ms(lambda: Template.parse(largest["template_source"]), 50),
         "target_ms": 20.0, "template": largest["template_name"], "template_chars": len(largest["template_source"])},
        {"case": "render_largest_oracle_template", "median_ms": median_ms(lambda: big_template.render_chat(
            big_case["messages"], add_generation_prompt=True, tools=big_case["tools"], now=now, **big_case["template_vars"])),
         "target_ms": None, "template": largest["template_name"]},
    ]
    print(f"{'case':36} {'median_ms':>10} {'target_ms':>10}")
    for r in results:
        target = "-" if r["target_ms"] is None else f"{r['target_ms']:.1f}"
        print(f"{r['case']:36} {r['median_ms']:10.3f} {target:>10}")
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
