"""Two engines on two cores: chat streams' inter-token gaps while a big embeddings call runs.

    python bench/shared_cpu.py [--streams 16] [--inputs 2048] [--baseline-s 5]

One tlserve.py process (its own interpreter) serves smol-135m (chat) and all-minilm-l6-v2
(embedding) from runtime.toml plus a `[[models]]` table. `--streams` chat streams start
(temperature 0, ignore_eos, long max_tokens); once every stream has its first token and
`--baseline-s` has passed, one /v1/embeddings call of `--inputs` sentences of 10-60 words
(bench/bench_encoder.py's sentences) goes to the encoder. Every streamed token's arrival is
stamped; the inter-token gaps of each stream are reported for the baseline window (chat
alone) and the embeddings window (from the call's send to its answer): p50, p99 and the
worst gap, with the call's time and sentences/s. The streams are closed after the call.

How the engines share the CPU: every chat step and every encoder batch (at most
`max_batch_tokens` padded tokens, `--batch-tokens`) takes the process-wide compute turn
(server/worker/compute_turn.py) first come first served, so a chat step waits at most one
encoder batch. The target: ITL p99 <= 0.5 s and worst gap <= 1 s while the call runs.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_encoder import sentences  # noqa: E402
from cli.fetch import MINILM, ensure_model  # noqa: E402

READY = re.compile(r"ready: API on (\S+), health on (\S+)")
CHAT_MODEL_DIR = REPO / "artifacts/models/smol-135m"
STREAM_TOKENS = 4000               # longer than any run: the streams are closed after the call
TARGET_P99_S, TARGET_WORST_S = 0.5, 1.0


def start_server(batch_tokens: int) -> tuple[subprocess.Popen, str]:
    minilm = ensure_model(REPO / MINILM.default_dest, model=MINILM.name)
    config = (REPO / "runtime.toml").read_text().replace(
        'model_dir = "artifacts/models/smol-135m"', f'model_dir = "{CHAT_MODEL_DIR}"')
    config += (f'\n[[models]]\nid = "minilm"\nmodel_dir = "{minilm}"\nkind = "embedding"\n'
               f"max_batch_tokens = {batch_tokens}\n")
    path = Path(tempfile.mkdtemp()) / "runtime.toml"
    path.write_text(config)
    proc = subprocess.Popen([sys.executable, str(REPO / "tlserve.py"), "--config", str(path),
                             "--port", "0", "--health-port", "0"],   # INFO: the ready line
                            cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    for line in proc.stderr:
        match = READY.search(line)
        if match:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, "http://" + match.group(1)
    raise SystemExit("the server did not start")


def stream(url: str, stamps: list[float], stop: threading.Event) -> None:
    body = {"model": "smol-135m", "stream": True, "max_tokens": STREAM_TOKENS,
            "ignore_eos": True, "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me a long story."}]}
    with requests.post(url + "/v1/chat/completions", json=body, stream=True,
                       timeout=600) as reply:
        for line in reply.iter_lines(chunk_size=None):      # as the bytes arrive
            if line.startswith(b"data: {") and b'"content"' in line:
                stamps.append(time.monotonic())
            if stop.is_set():
                return


def gaps_in(stamps_per_stream: list[list[float]], start_s: float, end_s: float) -> list[float]:
    """The inter-token gaps of every stream that end inside [start_s, end_s] (a gap that
    spans the window's start counts: the stream was waiting inside the window)."""
    gaps = []
    for stamps in stamps_per_stream:
        gaps += [b - a for a, b in zip(stamps, stamps[1:]) if start_s < b <= end_s]
    return gaps


def worst_gaps(stamps_per_stream: list[list[float]], start_s: float, end_s: float,
               count: int = 3) -> list[tuple[float, float]]:
    """The `count` longest gaps in the window as (seconds after start_s the gap ended, gap):
    where in the call the streams waited longest."""
    ended = [(round(b - start_s, 2), round(b - a, 3)) for stamps in stamps_per_stream
             for a, b in zip(stamps, stamps[1:]) if start_s < b <= end_s]
    return sorted(ended, key=lambda e: -e[1])[:count]


def summary(gaps: list[float]) -> dict:
    gaps = sorted(gaps)
    if not gaps:
        return {"gaps": 0}
    return {"gaps": len(gaps), "p50_s": round(gaps[len(gaps) // 2], 3),
            "p99_s": round(gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))], 3),
            "worst_s": round(gaps[-1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--inputs", type=int, default=2048)
    parser.add_argument("--baseline-s", type=float, default=5.0)
    parser.add_argument("--batch-tokens", type=int, default=384)   # ENCODER_BATCH_TOKENS
    args = parser.parse_args()
    proc, url = start_server(args.batch_tokens)
    stop = threading.Event()
    stamps: list[list[float]] = [[] for _ in range(args.streams)]
    threads = [threading.Thread(target=stream, args=(url, s, stop), daemon=True) for s in stamps]
    try:
        for thread in threads:
            thread.start()
        while not all(stamps):
            time.sleep(0.05)
        print(f"{args.streams} streams running; baseline {args.baseline_s} s", file=sys.stderr)
        base_start = time.monotonic()
        time.sleep(args.baseline_s)
        texts = sentences(args.inputs, "10,60")
        print(f"embedding {args.inputs} sentences", file=sys.stderr)
        embed_start = time.monotonic()
        reply = requests.post(url + "/v1/embeddings", json={"model": "minilm", "input": texts},
                              timeout=600)
        embed_end = time.monotonic()
        reply.raise_for_status()
        stop.set()
        alone, shared = (gaps_in(stamps, base_start, embed_start),
                         gaps_in(stamps, embed_start, embed_end))
        result = {"streams": args.streams, "inputs": args.inputs,
                  "batch_tokens": args.batch_tokens,
                  "prompt_tokens": reply.json()["usage"]["prompt_tokens"],
                  "embed_s": round(embed_end - embed_start, 2),
                  "sentences_per_s": round(args.inputs / (embed_end - embed_start), 1),
                  "chat_alone": summary(alone), "chat_while_embedding": summary(shared),
                  "worst_gaps_at_s": worst_gaps(stamps, embed_start, embed_end),
                  "worst_alone_gaps_at_s": worst_gaps(stamps, base_start, embed_start)}
        verdict = shared and (summary(shared)["p99_s"] <= TARGET_P99_S
                              and summary(shared)["worst_s"] <= TARGET_WORST_S)
        result["meets_target"] = bool(verdict)
        print(json.dumps(result))
    finally:
        stop.set()
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
