"""One decode step on smol-135m with LoRA adapters in the batch vs the base alone.

The runner (engine/core/runner.py) computes the base matmuls once for every row of a step
and adds each adapter's low-rank product on its rows only (engine/model/lora_batch.py).
This times its batched forward on the real model, after a 128-token prompt per sequence
was prefilled through the engine, in three pairs of cells:

  16 rows   16 base rows                  vs  4 base rows + 3 rows on each of 4 adapters
  1 row     1 base row                    vs  1 row on one adapter (its merged weights,
                                              engine/model/lora_merge.py)
  1 row     1 base row                    vs  1 row on one adapter, grouped (merging off)

The adapters are shaped like a typical small fine-tune (r = 8 on q_proj, v_proj, o_proj
and down_proj of every layer, alpha 16), with random weights written as PEFT folders into
a temporary directory and read back by `load_adapter`. The prompts' K/V come from the
base: the step's cost does not depend on the values. Each cell is the fastest of
`--repeats` forwards, the two sides of a pair alternating forward by forward so both see
the same machine. Printed: milliseconds per step, the adapters' speed as a fraction of
the base's (base ms / adapter ms), and the adapters' products alone (grouping the rows
and every layer's `add_low_rank` calls on activations of the step's shapes): on a busy
machine the two forwards' difference drowns in noise, that column does not. Also printed:
how long merging one adapter took and the bytes it copied. Usage (a quiet machine):

    python bench/lora_step.py [--repeats 15] [--adapters 4]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.step_rows import chunk_of, prefilled  # noqa: E402
from cli.fetch import DEFAULT_DEST  # noqa: E402
from engine.api import load_model, tune_malloc  # noqa: E402
from engine.model.lora import LoraAdapter, load_adapter  # noqa: E402
from engine.model.lora_batch import LoraBatch, add_low_rank  # noqa: E402
from engine.model.spec import ModelConfig  # noqa: E402
from tests.formats_writers import write_safetensors  # noqa: E402

RANK = 8
ALPHA = 16
TARGETS = ("self_attn.q_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.down_proj")
BATCH_ROWS = 16
BASE_ROWS = 4                   # of the 16; the rest split evenly over the adapters


def write_random_adapter(folder: Path, cfg: ModelConfig, seed: int) -> Path:
    """A PEFT-layout LoRA folder with r = RANK on TARGETS of every layer, random weights."""
    rng = np.random.default_rng(seed)
    d, q, kv, ff = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    shapes = {"self_attn.q_proj": (q, d), "self_attn.v_proj": (kv, d),
              "self_attn.o_proj": (d, q), "mlp.down_proj": (d, ff)}       # (out, in)
    tensors = {}
    for layer in range(cfg.num_layers):
        for target in TARGETS:
            out_dim, in_dim = shapes[target]
            key = f"base_model.model.model.layers.{layer}.{target}"
            tensors[f"{key}.lora_A.weight"] = (rng.standard_normal((RANK, in_dim))
                                               / np.sqrt(in_dim)).astype(np.float32)
            tensors[f"{key}.lora_B.weight"] = (rng.standard_normal((out_dim, RANK))
                                               * 0.01).astype(np.float32)
    folder.mkdir(parents=True)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": ALPHA,
              "target_modules": [t.rsplit(".", 1)[1] for t in TARGETS], "bias": "none"}
    (folder / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    write_safetensors(folder / "adapter_model.safetensors", tensors)
    return folder


def best_pair_ms(runner, base_chunks: list, lora_chunks: list, repeats: int) -> tuple[float, float]:
    """The fastest forward of each batch in ms, the two alternating."""
    best = [float("inf"), float("inf")]
    for chunks in (base_chunks, lora_chunks):
        runner.forward(chunks)                               # warm (mirror, buffers)
    for _ in range(repeats):
        for side, chunks in enumerate((base_chunks, lora_chunks)):
            start = time.perf_counter()
            runner.forward(chunks)
            best[side] = min(best[side], time.perf_counter() - start)
    return best[0] * 1e3, best[1] * 1e3


def products_ms(chunks: list, cfg: ModelConfig, repeats: int) -> float:
    """The fastest time in ms of the step's adapter work alone: rows grouped, then per layer
    the products of qkv, o, gate_up and down added to outputs of the step's shapes."""
    rng = np.random.default_rng(0)
    n = sum(len(c.tokens) for c in chunks)
    x = rng.standard_normal((n, max(cfg.hidden_size, cfg.q_size, cfg.intermediate_size)),
                            dtype=np.float32)                               # [N, widest in]
    outs = {"qkv": cfg.q_size + 2 * cfg.kv_size, "o": cfg.hidden_size,
            "gate_up": 2 * cfg.intermediate_size, "down": cfg.hidden_size}
    ins = {"qkv": cfg.hidden_size, "o": cfg.q_size, "gate_up": cfg.hidden_size,
           "down": cfg.intermediate_size}
    buffers = {t: np.zeros((n, width), np.float32) for t, width in outs.items()}
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        batch = LoraBatch.of_chunks([c.adapter for c in chunks], [len(c.tokens) for c in chunks])
        for index in range(cfg.num_layers):
            layer = batch.layer(index)
            for target, out in buffers.items():
                add_low_rank(out, x[:, :ins[target]], getattr(layer, target))
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--adapters", type=int, default=4)
    args = ap.parse_args()
    tune_malloc()
    model = load_model(ROOT / DEFAULT_DEST)
    with tempfile.TemporaryDirectory(prefix="lora-bench-") as tmp:
        adapters: list[LoraAdapter] = [
            load_adapter(write_random_adapter(Path(tmp) / f"adapter-{i}", model.config, i),
                         model.config) for i in range(args.adapters)]
    engine, seqs = prefilled(model, BATCH_ROWS)
    rows = [chunk_of(engine, s, 1) for s in seqs]                 # 16 decode rows
    per_adapter = (BATCH_ROWS - BASE_ROWS) // args.adapters
    owners = [None] * BASE_ROWS + [a for a in adapters for _ in range(per_adapter)]
    owners += [None] * (BATCH_ROWS - len(owners))
    mixed = [dataclasses.replace(c, adapter=a) for c, a in zip(rows, owners)]
    base16, lora16 = best_pair_ms(engine.runner, rows, mixed, args.repeats)
    one = rows[:1]
    lora1_chunks = [dataclasses.replace(one[0], adapter=adapters[0])]
    base1, lora1 = best_pair_ms(engine.runner, one, lora1_chunks, args.repeats)       # merged
    merged = engine.runner.merges.current                          # built by that cell
    engine.runner.merges.enabled = False                           # the same row, grouped
    base1g, lora1g = best_pair_ms(engine.runner, one, lora1_chunks, args.repeats)
    engine.runner.merges.enabled = True
    products16 = products_ms(mixed, model.config, args.repeats)
    products1 = products_ms(lora1_chunks, model.config, args.repeats)
    print(f"{'cell':<46} {'base ms':>8} {'lora ms':>8} {'lora speed':>11} {'products ms':>12}")
    print(f"{f'16 rows: {BASE_ROWS} base + {per_adapter} on each of {args.adapters} adapters':<46} "
          f"{base16:>8.2f} {lora16:>8.2f} {base16 / lora16:>10.2f}x {products16:>12.2f}")
    print(f"{'1 row on one adapter, merged':<46} {base1:>8.2f} {lora1:>8.2f} {base1 / lora1:>10.2f}x "
          f"{0.0:>12.2f}")
    print(f"{'1 row on one adapter, grouped':<46} {base1g:>8.2f} {lora1g:>8.2f} "
          f"{base1g / lora1g:>10.2f}x {products1:>12.2f}")
    print(f"merging the adapter: {merged.build_s * 1e3:.0f} ms, {merged.nbytes / 1e6:.0f} MB copied")
    print(json.dumps({"rows16_base_ms": round(base16, 2), "rows16_lora_ms": round(lora16, 2),
                      "rows16_products_ms": round(products16, 3),
                      "rows1_base_ms": round(base1, 2), "rows1_lora_ms": round(lora1, 2),
                      "rows1_grouped_base_ms": round(base1g, 2),
                      "rows1_grouped_lora_ms": round(lora1g, 2),
                      "rows1_products_ms": round(products1, 3),
                      "merge_build_ms": round(merged.build_s * 1e3, 1), "merge_bytes": merged.nbytes,
                      "adapters": args.adapters, "rank": RANK, "repeats": args.repeats}))


if __name__ == "__main__":
    main()
