"""all-MiniLM-L6-v2 throughput: one big batch of short sentences, and one sentence alone.

    python bench/bench_encoder.py [--inputs 2048] [--repeats 2] [--words 6,20] [--per-call N]
                                  [--batch-tokens N] [--url http://127.0.0.1:8000]

The sentences are built deterministically (seeded choice of 6..20 common words and a full
stop: 8..24 tokens with [CLS]/[SEP]). One `embed` call takes all of them, as one
/v1/embeddings request would (`--per-call N`: calls of N inputs, as requests of N would);
it is timed in two parts, tokenizing (`token_ids`) and the forward passes (`embed_ids`). Inside the forward, the time of the attention proper (scores,
softmax, mixing; not its projections), the GELU and the LayerNorms is measured by wrapping
those functions (engine/encoder/bert.py); the rest is the four dense matmuls per layer
(q/k/v fused, attention output, FFN in and out) and the embedding lookup. Also: the latency of one
short sentence (median of `--single` calls). Prints a table and a final JSON line.

Two cores shared with anything else make OpenBLAS's two threads collapse (a 256-token
forward went from 0.07 s with OPENBLAS_NUM_THREADS=1 to 2.4 s with 2 threads on a busy
machine): run it quiet, or compare OPENBLAS_NUM_THREADS=1.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from engine.blas_env import tune_blas_threads  # noqa: E402
BLAS_TUNED = tune_blas_threads()                # as tlserve.py does, before numpy loads
import numpy as np  # noqa: E402

from cli.fetch import MINILM, ensure_model  # noqa: E402
from engine.api import load_encoder  # noqa: E402
from engine.encoder import bert  # noqa: E402

WORDS = ("the a an this that one some every small large red quick lazy old new good bad "
         "cat dog man woman child city house car tree river book idea model search query "
         "runs sits plays reads writes finds makes takes gives sees likes wants needs "
         "on in under over near with from into about after before quickly slowly today").split()
DEFAULT_WORDS = "6,20"             # words per sentence, inclusive range
SEED = 21
TIMED_STAGES = ("attention", "gelu_erf_", "layer_norm")


def sentences(count: int, words: str = DEFAULT_WORDS) -> list[str]:
    low, high = (int(w) for w in words.split(","))
    rng = np.random.default_rng(SEED)
    out = []
    for _ in range(count):
        n = int(rng.integers(low, high + 1))
        out.append(" ".join(rng.choice(WORDS, size=n)).capitalize() + ".")
    return out


def time_stages(seconds: dict[str, float]) -> None:
    """Wrap bert's attention / GELU / LayerNorm so each call adds its wall time."""
    for name in TIMED_STAGES:
        inner = getattr(bert, name)

        def timed(*args, _inner=inner, _name=name, **kwargs):
            start = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                seconds[_name] += time.perf_counter() - start
        setattr(bert, name, timed)


def embed_rows(encoder, rows: list[list[int]], batch_tokens: int | None) -> np.ndarray:
    """`Encoder.embed_ids`, its forwards bounded as the server's encoder thread bounds them."""
    out = np.zeros((len(rows), encoder.hidden_size), np.float32)               # [n, H]
    for batch, vectors in encoder.iter_batches(rows, batch_tokens):
        out[batch] = vectors
    return out


def over_http(args: argparse.Namespace) -> int:
    """Sentences/s through a server: sequential /v1/embeddings requests of --per-call inputs
    (the HTTP, JSON and admission costs included); then one short sentence's latency."""
    import requests
    texts = sentences(args.inputs, args.words)
    per_call = args.per_call or len(texts)

    def post(inputs: list[str]) -> dict:
        reply = requests.post(args.url + "/v1/embeddings", timeout=600,
                              json={"model": args.model, "input": inputs})
        reply.raise_for_status()
        return reply.json()
    post(texts[:32])                                            # warm
    best_s, tokens = float("inf"), 0
    for _ in range(args.repeats):
        start, tokens = time.perf_counter(), 0
        for first in range(0, len(texts), per_call):
            tokens += post(texts[first:first + per_call])["usage"]["prompt_tokens"]
        best_s = min(best_s, time.perf_counter() - start)
    single = []
    for text in texts[:args.single]:
        start = time.perf_counter()
        post([text.split(".")[0][:60]])
        single.append(time.perf_counter() - start)
    result = {"url": args.url, "inputs": args.inputs, "per_call": per_call, "words": args.words,
              "tokens": tokens, "wall_s": round(best_s, 3),
              "inputs_per_s": round(args.inputs / best_s, 1),
              "single_sentence_ms_median": round(1000 * statistics.median(single), 2)}
    print(f"{args.inputs} inputs over HTTP in requests of {per_call}: {best_s:.2f} s "
          f"({result['inputs_per_s']} inputs/s); one short sentence: "
          f"median {result['single_sentence_ms_median']} ms")
    print(json.dumps(result))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--single", type=int, default=20, help="calls for the one-input latency")
    parser.add_argument("--words", default=DEFAULT_WORDS, help="MIN,MAX words per sentence")
    parser.add_argument("--per-call", type=int, default=0, help="inputs per embed call (0: all)")
    parser.add_argument("--url", default="",
                        help="a running server's API (http://host:port): time /v1/embeddings "
                             "requests of --per-call inputs instead of the encoder in-process")
    parser.add_argument("--model", default="all-minilm-l6-v2", help="the model id, with --url")
    parser.add_argument("--batch-tokens", type=int, default=0,
                        help="padded tokens per forward (0: the encoder's MAX_BATCH_TOKENS; "
                             "the server's encoder thread uses ENCODER_BATCH_TOKENS = 384)")
    args = parser.parse_args(argv)
    if args.url:
        return over_http(args)
    encoder = load_encoder(ensure_model(REPO_ROOT / MINILM.default_dest, model=MINILM.name))
    texts = sentences(args.inputs, args.words)
    per_call = args.per_call or len(texts)
    encoder.embed(texts[:64])                                   # warm the pages and caches
    stage_s: dict[str, float] = defaultdict(float)
    time_stages(stage_s)
    best = None
    for _ in range(args.repeats):
        stage_s.clear()
        start = time.perf_counter()
        rows, parts, tokenize_s = [], [], 0.0
        for first in range(0, len(texts), per_call):
            begin = time.perf_counter()
            call_rows = encoder.token_ids(texts[first:first + per_call])
            tokenize_s += time.perf_counter() - begin
            parts.append(embed_rows(encoder, call_rows, args.batch_tokens or None))
            rows += call_rows
        done = time.perf_counter()
        vectors = np.concatenate(parts)
        run = {"tokenize_s": tokenize_s, "forward_s": done - start - tokenize_s,
               "wall_s": done - start, **{f"{k}_s": v for k, v in stage_s.items()}}
        if best is None or run["wall_s"] < best["wall_s"]:
            best = run
    assert vectors.shape == (args.inputs, encoder.hidden_size)
    tokens = sum(len(r) for r in rows)
    single = []
    for text in texts[:args.single]:
        start = time.perf_counter()
        encoder.embed([text])
        single.append(time.perf_counter() - start)
    result = {"inputs": args.inputs, "per_call": per_call, "words": args.words,
              "batch_tokens": args.batch_tokens or "default", "tokens": tokens,
              **{k: round(v, 4) for k, v in best.items()},
              "tokens_per_s": round(tokens / best["wall_s"]),
              "inputs_per_s": round(args.inputs / best["wall_s"], 1),
              "single_sentence_ms_median": round(1000 * statistics.median(single), 2),
              "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
              "blas_spin_tuned": BLAS_TUNED}
    rest = best["forward_s"] - sum(best.get(f"{k}_s", 0.0) for k in TIMED_STAGES)
    print(f"{args.inputs} inputs ({args.words} words, {per_call} per call), {tokens} tokens: wall {best['wall_s']:.2f} s "
          f"({result['tokens_per_s']} tokens/s, {result['inputs_per_s']} inputs/s)")
    print(f"  tokenize {best['tokenize_s']:.3f} s | forward {best['forward_s']:.3f} s = "
          + " + ".join(f"{k} {best.get(f'{k}_s', 0.0):.3f}" for k in TIMED_STAGES)
          + f" + matmuls/embeddings {rest:.3f}")
    print(f"  one short sentence: median {result['single_sentence_ms_median']} ms")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
