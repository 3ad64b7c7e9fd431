"""Step time by rows (smol-135m unless `--model`): N decoding streams of one row vs one
stream verifying drafts, or (`--parts`) a decode step in its parts beside the bound.

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
show what choosing the matmul's shape by row count gains.

With `--parts` (any model: `--model DIR`) each N-stream decode step is broken into its
parts instead, timed inside the engine's own forward by wrapping the functions that do
them: the projections (every `project` call but the LM head's), attention per layer kind
(sliding / global), the head, and the rest (norms, RoPE, embeddings, K/V writes, the
plan); sampling is timed apart on the step's logits, per request setting (greedy, top_p,
top_k, logprobs). Beside it, the perfect-numpy bound for the same rows
(bench/mix_ceiling.py): the model's matmul shapes with random weights, the layer stack
and the head each timed alone, and the K/V the rows must read (windowed for sliding
layers) at the measured bandwidth. Usage (a quiet machine):

    python bench/step_rows.py [--rows 1 2 4 8 16 32] [--repeats 15] [--plain]
    python bench/step_rows.py --parts --model artifacts/models/gemma-3-270m --rows 1 16 64
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
from engine.core import runner, sampler  # noqa: E402
from engine.model import llama  # noqa: E402
from bench.mix_ceiling import MixCeiling, ModelShape, read_bandwidth  # noqa: E402

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


# --------------------------------------------------------------------------- --parts

FORWARD_PARTS = ("projections", "attn_sliding", "attn_global", "head")
# Sampling settings timed on a step's logits, every row under the same one.
SAMPLING = {"greedy": None,                 # the engine's batched argmax of every row
            "top_p": SamplingParams(temperature=0.8, top_p=0.95),
            "top_k": SamplingParams(temperature=0.8, top_k=40),
            "logprobs": SamplingParams(temperature=0.0, logprobs=True, top_logprobs=5)}
SAMPLING_REPEATS = 3


class PartClock:
    """Seconds spent in each forward part since the last `reset`."""

    def __init__(self):
        self.seconds = dict.fromkeys(FORWARD_PARTS, 0.0)

    def reset(self) -> None:
        self.seconds = dict.fromkeys(FORWARD_PARTS, 0.0)

    def add(self, part: str, start_s: float) -> None:
        self.seconds[part] += time.perf_counter() - start_s


@contextlib.contextmanager
def timed_parts(model_runner, clock: PartClock):
    """For the duration, every projection and every attention call of `model_runner`
    adds its time to `clock` (the modules' names and the runner's method swapped for
    timing wrappers: a benchmark-only device, restored on exit)."""
    saved_project = llama.project, runner.project
    plain_project, lm_head = llama.project, model_runner.weights.lm_head
    attend = model_runner._attend

    def timed_project(x, w):
        start = time.perf_counter()
        out = plain_project(x, w)
        clock.add("head" if w is lm_head else "projections", start)
        return out

    def timed_attend(q, layer, group):
        start = time.perf_counter()
        out = attend(q, layer, group)
        clock.add("attn_sliding" if model_runner.layer_is_local[layer] else "attn_global", start)
        return out
    llama.project = runner.project = timed_project
    model_runner._attend = timed_attend                  # shadows the method on this instance
    try:
        yield
    finally:
        llama.project, runner.project = saved_project
        del model_runner._attend


def sampling_s(logits, seqs, params: SamplingParams | None) -> float:
    """Seconds to sample every row of logits [R, V] under `params` (None: the batched
    argmax every step takes), fastest of SAMPLING_REPEATS."""
    best = float("inf")
    for _ in range(SAMPLING_REPEATS):
        start = time.perf_counter()
        if params is None:
            sampler.greedy_tokens(logits)
        else:
            for row, seq in zip(logits, seqs):
                sampler.sample(row, params, seed=seq.seed, sample_index=seq.num_generated,
                               output_counts=seq.output_counts)
        best = min(best, time.perf_counter() - start)
    return best


def parts_cell(engine: Engine, seqs: list, rows: int, repeats: int, ceiling: MixCeiling,
               read_bytes_s: float) -> dict:
    """One N-stream decode step in parts (ms), from the fastest of `repeats` forwards, and
    the bound for the same rows."""
    chunks = [chunk_of(engine, s, 1) for s in seqs[:rows]]
    clock = PartClock()
    best_s, best_parts, logits = float("inf"), {}, None
    with timed_parts(engine.runner, clock):
        engine.runner.forward(chunks)                                  # warm (mirror, buffers)
        for _ in range(repeats):
            clock.reset()
            start = time.perf_counter()
            logits = engine.runner.forward(chunks)                     # [R, V]
            total_s = time.perf_counter() - start
            if total_s < best_s:
                best_s, best_parts = total_s, dict(clock.seconds)
    result = {"rows": rows, "context": chunks[0].start_pos + 1, "forward_ms": best_s * 1e3}
    result.update({f"{part}_ms": s * 1e3 for part, s in best_parts.items()})
    result["rest_ms"] = (best_s - sum(best_parts.values())) * 1e3
    for name, params in SAMPLING.items():
        result[f"sample_{name}_ms"] = sampling_s(logits, seqs[:rows], params) * 1e3
    layers_s, head_s = ceiling.parts_s(rows, rows)
    floor_s = ceiling.shape.kv_read_bytes([c.start_pos + 1 for c in chunks]) / read_bytes_s
    result.update(bound_layers_ms=layers_s * 1e3, bound_head_ms=head_s * 1e3,
                  bound_kv_ms=floor_s * 1e3, bound_ms=(layers_s + head_s + floor_s) * 1e3)
    result["of_bound"] = result["bound_ms"] / (result["forward_ms"] + result["sample_greedy_ms"])
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}


def print_parts(results: list[dict]) -> None:
    head = ["rows", "forward", "proj", "attn_sl", "attn_gl", "head", "rest", "s_greedy",
            "s_top_p", "s_top_k", "s_logprob", "b_layers", "b_head", "b_kv", "bound", "of_bound"]
    keys = ["rows", "forward_ms", "projections_ms", "attn_sliding_ms", "attn_global_ms", "head_ms",
            "rest_ms", "sample_greedy_ms", "sample_top_p_ms", "sample_top_k_ms", "sample_logprobs_ms",
            "bound_layers_ms", "bound_head_ms", "bound_kv_ms", "bound_ms", "of_bound"]
    print(" ".join(f"{h:>9}" for h in head))
    for r in results:
        print(" ".join(f"{r[k]:>9}" for k in keys))
    for r in results:
        print(json.dumps(r))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--plain", action="store_true", help="also time plain x @ w, side by side")
    ap.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS,
                    help="context before the timed rows (an edit's answer runs at ~600-1400)")
    ap.add_argument("--parts", action="store_true",
                    help="break each N-stream step into its parts, beside the bound")
    ap.add_argument("--model", type=Path, default=ROOT / DEFAULT_DEST, help="the model's folder")
    args = ap.parse_args()
    tune_malloc()
    model = load_model(args.model)
    results = []
    engine, seqs = prefilled(model, max(args.rows), args.prompt_tokens)
    if args.parts:
        ceiling, read_bytes_s = MixCeiling(ModelShape.of(model.config)), read_bandwidth()
        print_parts([parts_cell(engine, seqs, rows, args.repeats, ceiling, read_bytes_s)
                     for rows in args.rows])
        return
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
