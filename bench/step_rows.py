"""Step time by rows on smol-135m: N decoding streams of one row vs one stream verifying drafts.

Issue 24's question: a memory-bound step reads the same weights for 1 row as for 8, so a
draft that is accepted should be nearly free. This times the engine's own batched forward
(`ModelRunner.forward`, engine/core/runner.py) on the real model, after a 128-token
prompt per sequence was prefilled through the engine:

  streams  N sequences, one decode row each                 (rows = N)
  drafts   one sequence, its last token + N - 1 drafted rows (rows = N)

The fastest of `--repeats` forwards per cell (the draft-length rule learns the same curve,
engine/core/step_cost.py `RowCostTable`). Usage (a quiet machine):

    python bench/step_rows.py [--rows 1 2 4 8 16 32] [--repeats 15]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.api import Engine, EngineConfig, GenRequest, SamplingParams, load_model, tune_malloc  # noqa: E402
from engine.core.chunk import Chunk  # noqa: E402
from cli.fetch import DEFAULT_DEST  # noqa: E402

PROMPT_TOKENS = 128
GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)


def prefilled(model, streams: int) -> tuple[Engine, list]:
    """An engine with `streams` sequences whose prompts are computed (each decodes next)."""
    engine = Engine(model, EngineConfig(max_num_seqs=max(64, streams)))
    for i in range(streams):
        prompt = tuple(1000 + (i * 7919 + j * 104729) % 40000 for j in range(PROMPT_TOKENS))
        engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=1000))
    while any(s.num_uncomputed > 1 for s in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()
    return engine, list(engine.scheduler.running)


def time_forward(engine: Engine, chunks: list[Chunk], repeats: int) -> float:
    engine.runner.forward(chunks)                        # warm (mirror, buffers)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        engine.runner.forward(chunks)
        times.append(time.perf_counter() - start)
    return min(times)                                    # the least disturbed run: the machine is shared


def chunk_of(engine: Engine, seq, rows: int) -> Chunk:
    """The sequence's last token plus rows - 1 drafted positions (blocks grown to hold them)."""
    assert engine.blocks.grow(seq.blocks, seq.num_computed + rows)
    drafts = tuple(seq.tokens[-1:]) * (rows - 1)
    return Chunk(tuple(seq.tokens[seq.num_computed:]) + drafts, seq.num_computed,
                 tuple(seq.blocks), rows, seq.id)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    tune_malloc()
    model = load_model(ROOT / DEFAULT_DEST)
    results = []
    engine, seqs = prefilled(model, max(args.rows))
    for rows in args.rows:
        streams_s = time_forward(engine, [chunk_of(engine, s, 1) for s in seqs[:rows]], args.repeats)
        drafts_s = time_forward(engine, [chunk_of(engine, seqs[0], rows)], args.repeats)
        results.append({"rows": rows, "streams_ms": round(streams_s * 1e3, 2),
                        "drafts_ms": round(drafts_s * 1e3, 2)})
    base = results[0]["streams_ms"]
    print(f"{'rows':>5} {'N streams ms':>13} {'1 + drafts ms':>14} {'x one row':>10}")
    for r in results:
        print(f"{r['rows']:>5} {r['streams_ms']:>13} {r['drafts_ms']:>14} {r['streams_ms'] / base:>10.2f}")
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
