"""Serving with LoRA adapters over HTTP vs the base alone: one server, alternating cells.

One tl-serve process (bench/load_server.py's `spawned`: its own process, free ports)
serves smol-135m and four adapters shaped like `smol-135m-lora` (r = 8 on q_proj, v_proj,
o_proj and down_proj of every layer, alpha 16, random weights bench/lora_step.py writes as
PEFT folders), as `[[models]]` tables of kind "lora" through `TL_ENGINE__MODELS`. The load
is load_sweep's default workload (bench/load_client.py's closed loop of streaming chats,
~40-100-token prompts that differ from the first words on, `max_tokens` tokens each,
`ignore_eos`), speculation as the server's configuration sets it, the same for both sides.
Two pairs of cells, each pair alternating base / adapters for `--rounds` rounds:

  16 streams   16 on the base          vs  4 on the base + 3 on each of the 4 adapters
  1 stream     1 on the base           vs  1 on one adapter (its steps run on the adapter's
                                           merged weights; `--no-merge`: grouped, as mixed)

A request's model is chosen by its index (request i of a cell: i mod 16 < 4 -> the base,
else adapter (i mod 16 - 4) // 3), so the closed loop keeps that mix in flight. Printed per
cell: output tok/s, TTFT and ITL p50; per pair the adapters' tok/s over the base's, the
median over the rounds (the targets: >= 0.85 at 16 streams, >= 0.9 at 1). Usage (a quiet
machine; `--quick` is a smoke run of a few seconds a cell):

    python bench/lora_serve.py [--rounds 3] [--duration-s 60] [--max-tokens 128] [--no-merge]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.load_client import run_load, summarize  # noqa: E402
from bench.load_server import chat_body, chat_prompt, spawned  # noqa: E402
from bench.lora_step import write_random_adapter  # noqa: E402
from cli.fetch import DEFAULT_DEST  # noqa: E402
from engine.api import load_model, model_name  # noqa: E402
from server.config import ENV_MODELS, ENV_PREFIX  # noqa: E402

ADAPTERS = 4
MIX_PERIOD = 16                 # of every 16 requests: 4 on the base, 3 on each adapter
MIX_BASE = 4
CELL_PROMPT_STRIDE = 100_000    # each cell's prompts are new to the prefix cache
QUICK = {"rounds": 1, "warmup_s": 1.0, "duration_s": 4.0, "max_tokens": 16}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(ROOT / DEFAULT_DEST))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--warmup-s", type=float, default=15.0)
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--quick", action="store_true", help="a smoke run (tiny cells)")
    p.add_argument("--no-merge", action="store_true",
                   help="serve with lora_merge = false (every step adds the products)")
    args = p.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    return args


def model_for(i: int, base: str, adapters: list[str], mixed: bool) -> str:
    """Request i's model: the base, or (mixed) the 4 + 3 x 4 rotation."""
    slot = i % MIX_PERIOD
    if not mixed or slot < MIX_BASE:
        return base
    return adapters[(slot - MIX_BASE) * len(adapters) // (MIX_PERIOD - MIX_BASE)]


def cell(endpoint, models, streams: int, index: int, args: argparse.Namespace) -> dict:
    first = index * CELL_PROMPT_STRIDE

    def body(i: int) -> bytes:
        return chat_body(models(i), chat_prompt(first + i), args.max_tokens)
    result = run_load(endpoint.target, body, streams, warmup_s=args.warmup_s,
                      duration_s=args.duration_s)
    return summarize(result)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = model_name(args.model_dir)
    config = load_model(args.model_dir).config
    with tempfile.TemporaryDirectory(prefix="lora-serve-") as tmp:
        names = [f"bench-lora-{k}" for k in range(ADAPTERS)]
        tables = [{"id": name, "kind": "lora", "base": base,
                   "adapter_dir": str(write_random_adapter(Path(tmp) / name, config, seed=k))}
                  for k, name in enumerate(names)]
        env = {ENV_MODELS: json.dumps(tables), ENV_PREFIX + "MAX_LORAS": str(ADAPTERS)}
        if args.no_merge:
            env[ENV_PREFIX + "LORA_MERGE"] = "false"
        pairs: dict[int, dict[bool, dict]] = {16: {}, 1: {}}    # streams -> side -> last row
        rows, index = [], 0
        with spawned(args.model_dir, env, "lora") as (endpoint, _server):
            for round_no in range(args.rounds):
                for streams, mixed in ((16, False), (16, True), (1, False), (1, True)):
                    if streams == 1:
                        models = (lambda i, m=mixed: names[0] if m else base)
                    else:
                        models = (lambda i, m=mixed: model_for(i, base, names, m))
                    row = cell(endpoint, models, streams, index, args)
                    index += 1
                    pairs[streams][mixed] = row
                    rows.append({"round": round_no, "streams": streams,
                                 "side": "adapters" if mixed else "base", **row})
                    print(f"round {round_no} {streams:2d} streams "
                          f"{'adapters' if mixed else 'base    '}: {row['tok_s']:7.1f} tok/s  "
                          f"TTFT p50 {row['ttft_p50_s']} s  ITL p50 {row['itl_p50_s']} s",
                          flush=True)
                for streams in (16, 1):
                    base_row, lora_row = pairs[streams][False], pairs[streams][True]
                    rows[-1 if streams == 1 else -3]["ratio"] = (
                        lora_row["tok_s"] / base_row["tok_s"] if base_row["tok_s"] else 0.0)
    for streams, target in ((16, 0.85), (1, 0.9)):
        ratios = [r["ratio"] for r in rows if r["streams"] == streams and "ratio" in r]
        print(f"{streams:2d} streams: adapters / base tok/s, median of {len(ratios)}: "
              f"{statistics.median(ratios):.3f} (target >= {target})")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
