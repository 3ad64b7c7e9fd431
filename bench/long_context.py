"""The long-context case: a few streams of one long prompt each, then a long answer.

C streams (default 4) each send one request at the same moment: a prompt of `--prompt-tokens`
distinct pseudo-random ordinary tokens (default 4,000; no prefix shared between streams) and
`--output-tokens` output tokens (default 256, greedy, ignore_eos). The engine runs alone, no
HTTP, until every request is done; every token's time is taken at the end of the step that
made it. One line of JSON, then a summary:

    ttft_p50_s / ttft_max_s   arrival -> first token, over the streams
    tok_s                     output tokens / (last token - first first-token): the decode phase
    wall_s                    arrival -> last token
    kv_blocks_peak            most blocks the global pool held at once (all layers, without
                              a window pool)
    window_blocks_peak        most blocks the sliding layers' window pool held at once
                              (engine/kv/window.py; absent for a model without one)
    kv_blocks_context         the blocks the whole context takes in one table, for scale

Run it on two checkouts to compare (the same model, settings and machine, nothing else
running), e.g. for Gemma 3 270M:

    python bench/long_context.py --model artifacts/models/gemma-3-270m
    python bench/long_context.py --model artifacts/models/smol-135m --prompt-tokens 40 \\
        --output-tokens 4 --streams 2          # a smoke test, seconds
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.blas_env import tune_blas_threads                                                 # noqa: E402
tune_blas_threads()                  # as tlserve.py does, before numpy loads
from engine.api import (Engine, EngineConfig, GenRequest, SamplingParams, TokenOut,           # noqa: E402
                        load_model, tune_malloc)
from engine.kv.pools import blocks_for_tokens                                                 # noqa: E402

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)
FIRST_ORDINARY_ID, ORDINARY_SPAN = 1000, 47000     # ids well inside every served vocabulary


def prompt_for(stream: int, num_tokens: int) -> tuple[int, ...]:
    """Stream `stream`'s prompt: distinct pseudo-random ordinary ids, no prefix in common."""
    return tuple(FIRST_ORDINARY_ID + (stream * 7717 + j * 104723) % ORDINARY_SPAN
                 for j in range(num_tokens))


def parse_setting(text: str) -> dict:
    """'key=value,key=value' of integer EngineConfig fields -> a dict."""
    out = {}
    for pair in filter(None, text.split(",")):
        key, value = pair.split("=", 1)
        out[key.strip()] = int(value)
    return out


def run(model, settings: dict, streams: int, prompt_tokens: int, output_tokens: int) -> dict:
    engine = Engine(model, EngineConfig(**settings))
    start_s = time.perf_counter()
    ids = [engine.add_request(GenRequest(prompt=prompt_for(s, prompt_tokens), params=GREEDY,
                                         max_tokens=output_tokens)) for s in range(streams)]
    first_s: dict[int, float] = {}
    produced = 0
    kv_peak = 0
    while engine.has_work():
        outs = engine.step()
        now_s = time.perf_counter()
        kv_peak = max(kv_peak, engine.blocks.num_used_blocks)
        for out in outs:
            if not isinstance(out, TokenOut) or out.token is None:
                continue
            produced += 1
            first_s.setdefault(out.id, now_s)
    end_s = time.perf_counter()
    ttft_s = [first_s[i] - start_s for i in ids]
    decode_s = end_s - min(first_s.values())
    row = {"settings": settings, "streams": streams, "prompt_tokens": prompt_tokens,
           "output_tokens": output_tokens, "produced_tokens": produced,
           "ttft_p50_s": round(statistics.median(ttft_s), 3), "ttft_max_s": round(max(ttft_s), 3),
           "tok_s": round((produced - streams) / decode_s, 1) if decode_s > 0 else None,
           "wall_s": round(end_s - start_s, 2), "kv_blocks_peak": kv_peak,
           "kv_blocks_context": streams * blocks_for_tokens(prompt_tokens + output_tokens,
                                                            engine.config.block_size),
           "preemptions": engine.stats().preemptions_total}
    window = engine.blocks.window
    if window is not None:
        row["window_blocks_peak"] = window.num_held_peak
        row["window_pool_blocks"] = window.num_blocks
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "artifacts" / "models" / "gemma-3-270m"))
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=4000)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--set", default="", help="EngineConfig key=value,... (integers)")
    args = ap.parse_args(argv)
    tune_malloc()
    model = load_model(args.model)
    settings = {"max_model_len": args.prompt_tokens + args.output_tokens + 1,
                **parse_setting(args.set)}
    row = run(model, settings, args.streams, args.prompt_tokens, args.output_tokens)
    print(json.dumps(row), flush=True)
    print(f"{model.name}: C={row['streams']} {row['prompt_tokens']}+{row['output_tokens']} tokens: "
          f"TTFT p50/max {row['ttft_p50_s']}/{row['ttft_max_s']} s, {row['tok_s']} tok/s, "
          f"KV blocks peak {row['kv_blocks_peak']} (window pool {row.get('window_blocks_peak', '-')}; "
          f"whole context {row['kv_blocks_context']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
