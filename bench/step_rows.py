"""Step time by rows on smol-135m: N decoding streams of one row vs one stream verifying drafts.

The question: a memory-bound step reads the same weights for 1 row as for 8, so a
draft that is accepted should be nearly free. This times the engine's own batched forward
(`ModelRunner.forward`, engine/core/runner.py) on the real model, after a 128-token
prompt per sequence was prefilled through the engine (`--prompt-tokens N` for a longer
context: an edit's answer runs at ~600-1400):

  streams  N sequences, one decode row each                 (rows = N)
  drafts   one sequence, its last token + N - 1 drafted rows (rows = N)

The fastest of `--repeats` forwards per cell (the draft-length rule learns the same curve,
engine/core/step_cost.py `RowCostTable`). With `--plain` each cell is also timed, side by
side, with every projection a plain `x @ w` (what engine/model/project.py replaced), to
show what choosing the matmul's shape by row count gains. Usage (a quiet machine):

    python bench/step_rows.py [--rows 1 2 4 8 16 32] [--repeats 15] [--plain]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.api import Engine, EngineConfig, GenRequest, SamplingParams, load_model, tune_malloc  # noqa: E402
from engine.core.chunk import Chunk  # noqa: E402
from cli.fetch import DEFAULT_DEST  # noqa: E402
from engine.core import runner  # noqa: E402
from engine.model import llama  # noqa: E402

PROMPT_TOKENS = 128
GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)


def prefilled(model, streams: int, prompt_tokens: int = PROMPT_TOKENS) -> tuple[Engine, list]:
    """An engine with `streams` sequences whose prompts are computed (each decodes next)."""
    engine = Engine(model, EngineConfig(max_num_seqs=max(64, streams)))
    for i in range(streams):
        prompt = tuple(1000 + (i * 7919 + j * 104729) % 40000 for j in range(prompt_tokens))
        engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=1000))
    while any(s.num_uncomputed > 1 for s in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()
    return engine, list(engine.scheduler.running)


def time_forward(engine: Engine, chunks: list[Chunk], repeats: int, plain: bool = False) -> dict:
    """The fastest of `repeats` forwards (the least disturbed: the machine is shared), in
    seconds, by shape: "shaped" (engine/model/project.py) and, with `plain`, "plain"
    (`x @ w`), the two alternating forward by forward so both see the same machine."""
    variants = {"shaped": contextlib.nullcontext}
    if plain:
        variants["plain"] = plain_matmul
    best = {name: float("inf") for name in variants}
    for name, shape in variants.items():
        with shape():
            engine.runner.forward(chunks)                # warm (mirror, buffers)
    for _ in range(repeats):
        for name, shape in variants.items():
            with shape():
                start = time.perf_counter()
                engine.runner.forward(chunks)
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def chunk_of(engine: Engine, seq, rows: int) -> Chunk:
    """The sequence's last token plus rows - 1 drafted positions (blocks grown to hold them)."""
    assert engine.blocks.grow(seq.blocks, seq.num_computed + rows)
    drafts = tuple(seq.tokens[-1:]) * (rows - 1)
    return Chunk(tuple(seq.tokens[seq.num_computed:]) + drafts, seq.num_computed,
                 tuple(seq.blocks), rows, seq.id)


@contextlib.contextmanager
def plain_matmul():
    """Every projection as `x @ w` for the duration (the modules' own name swapped: a
    benchmark-only comparison, restored on exit)."""
    saved = llama.project, runner.project
    llama.project = runner.project = lambda x, w: x @ w
    try:
        yield
    finally:
        llama.project, runner.project = saved


def cell(engine: Engine, seqs: list, rows: int, repeats: int, plain: bool) -> dict:
    """Both batches of `rows` rows -- N one-row streams, one stream with N - 1 drafts -- in ms,
    keyed "streams_ms", "drafts_ms" (and "plain_streams_ms", "plain_drafts_ms")."""
    result = {}
    for batch, chunks in (("streams", [chunk_of(engine, s, 1) for s in seqs[:rows]]),
                          ("drafts", [chunk_of(engine, seqs[0], rows)])):
        for name, seconds in time_forward(engine, chunks, repeats, plain).items():
            key = f"{batch}_ms" if name == "shaped" else f"plain_{batch}_ms"
            result[key] = round(seconds * 1e3, 2)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--plain", action="store_true", help="also time plain x @ w, side by side")
    ap.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS,
                    help="context before the timed rows (an edit's answer runs at ~600-1400)")
    args = ap.parse_args()
    tune_malloc()
    model = load_model(ROOT / DEFAULT_DEST)
    results = []
    engine, seqs = prefilled(model, max(args.rows), args.prompt_tokens)
    for rows in args.rows:
        results.append({"rows": rows, **cell(engine, seqs, rows, args.repeats, args.plain)})
    base = results[0]["streams_ms"]
    print(f"{'rows':>5} {'N streams ms':>13} {'1 + drafts ms':>14} {'x one row':>10}"
          + (f" {'plain streams':>14} {'plain drafts':>13}" if args.plain else ""))
    for r in results:
        print(f"{r['rows']:>5} {r['streams_ms']:>13} {r['drafts_ms']:>14} {r['streams_ms'] / base:>10.2f}"
              + (f" {r['plain_streams_ms']:>14} {r['plain_drafts_ms']:>13}" if args.plain else ""))
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
