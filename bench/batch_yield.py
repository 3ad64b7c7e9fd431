"""Batches yield to people: interactive streams alone, then beside a running batch, and
the batch alone against load_sweep's closed loop at the batch's concurrency.

One spawned server (`tlserve.py --config runtime.toml`, `[batch] dir` a temporary folder,
`[batch] max_running` at its default) and, per round, three cells:

    (a) alone    `--streams` streaming chat clients of load_sweep's default workload
                 (bench/load_sweep.py's measure: ~40-100 token prompts, `max_tokens` 128,
                 temperature 0, `ignore_eos`) for `--duration-s` after `--warmup-s`;
    (b) beside   the same clients while a `--batch-lines` batch of chat lines from the same
                 prompt generator (`max_tokens` 128, not streamed) runs: uploaded through
                 POST /v1/files, started with POST /v1/batches, the window opened once the
                 batch has answered its first line;
    (c) batch    the clients gone, the same batch alone for `--duration-s`: its output
                 tok/s is the lines it completed in the window (request_counts, polled)
                 times `max_tokens` (every answer has that length with `ignore_eos`; the
                 lines in flight at the two edges make it uncertain by about
                 max_running / lines-in-window). Then the batch is cancelled.

Rounds alternate the order ((a) first, then (b)+(c) first), and load_sweep's tok/s at
`max_running` streams is cell (a) when `--streams` equals it, else a cell of its own in the
same round. No request reaches the server twice (the suffix store would draft a repeat):
every cell's prompts, the batch's lines included, start at their own index.

    python bench/batch_yield.py                                    # the measurement
    python bench/batch_yield.py --duration-s 3 --warmup-s 1 --batch-lines 40 --streams 2 \\
        --max-tokens 8                                            # a smoke run

It prints one JSON line per cell (`cell`: alone | beside | batch | sweep_at_max_running),
then one summary line: `ttft_p50_ratio` and `itl_p50_ratio` (beside over alone; targets
<= 1.5 and <= 1.3) and `batch_tok_s_ratio` (the batch alone over load_sweep at
`max_running` streams; target >= 0.9), the medians over the rounds. Never run by the tests.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.load_server import chat_prompt, spawned                       # noqa: E402
from bench.load_sweep import CELL_PROMPT_STRIDE, measure                  # noqa: E402
from server.batch.settings import ENV_PREFIX as BATCH_ENV_PREFIX, BatchConfig  # noqa: E402

MAX_TOKENS = 128                 # load_sweep's default, and the batch lines'
POLL_S = 0.5                     # how often the batch object is read
HTTP_TIMEOUT_S = 60.0
STARTED_WITHIN_S = 600.0         # the batch's first answer (validation of the file included)
ENDED_WITHIN_S = 600.0           # a cancelled batch lets its requests in flight finish
TARGETS = {"ttft_p50_ratio": 1.5, "itl_p50_ratio": 1.3, "batch_tok_s_ratio": 0.9}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=None, help="the server's model (default: runtime.toml's)")
    p.add_argument("--streams", type=int, default=8, help="interactive clients in (a) and (b)")
    p.add_argument("--batch-lines", type=int, default=2000)
    p.add_argument("--warmup-s", type=float, default=15.0, help="not counted, per cell")
    p.add_argument("--duration-s", type=float, default=60.0, help="each cell's window")
    p.add_argument("--rounds", type=int, default=1, help="rounds of the cells, order flipped")
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS,
                   help="of every request, batch lines included (smaller only for a smoke run)")
    args = p.parse_args(argv)
    args.ignore_eos, args.client, args.requests = True, "python", 0   # load_sweep.measure's
    return args


class BatchApi:
    """The server's Files and Batch API, by plain urllib."""

    def __init__(self, host: str, port: int):
        self.base = f"http://{host}:{port}/v1"

    def _call(self, method: str, path: str, body: bytes | None = None,
              content_type: str = "application/json") -> dict:
        request = urllib.request.Request(self.base + path, data=body, method=method,
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as r:
            return json.load(r)

    def upload(self, name: str, data: bytes) -> str:
        boundary = uuid.uuid4().hex
        form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                f"batch\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"{name}\"\r\nContent-Type: application/jsonl\r\n\r\n").encode()
        form += data + f"\r\n--{boundary}--\r\n".encode()
        return self._call("POST", "/files", form, f"multipart/form-data; boundary={boundary}")["id"]

    def create(self, file_id: str) -> str:
        body = json.dumps({"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                           "completion_window": "24h"}).encode()
        return self._call("POST", "/batches", body)["id"]

    def batch(self, batch_id: str) -> dict:
        return self._call("GET", f"/batches/{batch_id}")

    def cancel(self, batch_id: str) -> dict:
        return self._call("POST", f"/batches/{batch_id}/cancel", b"")


def batch_file(model: str, base: int, lines: int, max_tokens: int) -> bytes:
    """`lines` chat lines of load_sweep's prompt generator from index `base` on, not streamed."""
    out = []
    for i in range(lines):
        body = {"model": model, "messages": [{"role": "user", "content": chat_prompt(base + i)}],
                "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        out.append(json.dumps({"custom_id": f"line-{i}", "method": "POST",
                               "url": "/v1/chat/completions", "body": body}))
    return ("\n".join(out) + "\n").encode()


def wait_for(api: BatchApi, batch_id: str, done, within_s: float, what: str) -> dict:
    deadline = time.monotonic() + within_s
    while True:
        doc = api.batch(batch_id)
        if done(doc):
            return doc
        if doc["status"] in ("failed", "expired", "cancelled", "completed") \
                or time.monotonic() > deadline:
            raise SystemExit(f"batch {batch_id}: {what} did not happen: {json.dumps(doc)}")
        time.sleep(POLL_S)


def batch_alone(api: BatchApi, batch_id: str, args: argparse.Namespace) -> dict:
    """Cell (c): the batch's completed lines over a window with nobody else there."""
    time.sleep(args.warmup_s)               # the interactive streams' last requests drain
    opened = api.batch(batch_id)
    t0 = time.perf_counter()
    time.sleep(args.duration_s)
    closed = api.batch(batch_id)
    window_s = time.perf_counter() - t0
    lines = closed["request_counts"]["completed"] - opened["request_counts"]["completed"]
    return {"window_s": round(window_s, 2), "lines_completed": lines,
            "tok_s": round(lines * args.max_tokens / window_s, 1),
            "batch_status_at_close": closed["status"],
            "batch_ran_whole_window": closed["status"] == "in_progress"}


def one_round(endpoint, api: BatchApi, r: int, args: argparse.Namespace, cells: list[int],
              max_running: int) -> list[dict]:
    def next_cell() -> int:
        cells[0] += 1
        return cells[0]

    def interactive(name: str, streams: int) -> dict:
        row = {"round": r, "cell": name, "streams": streams,
               **measure(endpoint, streams, next_cell(), args)}
        row.pop("mix", None)
        print(json.dumps(row), flush=True)
        return row

    def with_batch() -> list[dict]:
        data = batch_file(endpoint.model, next_cell() * CELL_PROMPT_STRIDE, args.batch_lines,
                          args.max_tokens)
        batch_id = api.create(api.upload(f"yield-{r}.jsonl", data))
        wait_for(api, batch_id, lambda d: d["request_counts"]["completed"] > 0,
                 STARTED_WITHIN_S, "a first answer")
        beside = interactive("beside", args.streams)
        beside["batch_status_at_close"] = api.batch(batch_id)["status"]
        alone = {"round": r, "cell": "batch", "max_running": max_running,
                 **batch_alone(api, batch_id, args)}
        print(json.dumps(alone), flush=True)
        if api.batch(batch_id)["status"] not in ("completed", "failed", "expired"):
            api.cancel(batch_id)
        wait_for(api, batch_id, lambda d: d["status"] in ("cancelled", "completed"),
                 ENDED_WITHIN_S, "the end")
        return [beside, alone]

    def without_batch() -> list[dict]:
        rows = [interactive("alone", args.streams)]
        if args.streams != max_running:
            rows.append(interactive("sweep_at_max_running", max_running))
        return rows

    halves = (without_batch, with_batch) if r % 2 == 0 else (with_batch, without_batch)
    return [row for half in halves for row in half()]


def ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 3) if num and den else None


def summary(rows: list[dict], streams: int, max_running: int) -> dict:
    per_round: dict[str, list[float]] = {k: [] for k in TARGETS}
    for r in sorted({row["round"] for row in rows}):
        cell = {row["cell"]: row for row in rows if row["round"] == r}
        sweep = cell["alone"] if streams == max_running else cell["sweep_at_max_running"]
        values = {"ttft_p50_ratio": ratio(cell["beside"]["ttft_p50_s"], cell["alone"]["ttft_p50_s"]),
                  "itl_p50_ratio": ratio(cell["beside"]["itl_p50_s"], cell["alone"]["itl_p50_s"]),
                  "batch_tok_s_ratio": ratio(cell["batch"]["tok_s"], sweep["tok_s"])}
        for key, value in values.items():
            if value is not None:
                per_round[key].append(value)
    out: dict = {"summary": True, "per_round": per_round}
    for key, target in TARGETS.items():
        median = statistics.median(per_round[key]) if per_round[key] else None
        met = None if median is None else (median >= target if key == "batch_tok_s_ratio"
                                           else median <= target)
        out[key], out[key + "_target"], out[key + "_met"] = median, target, met
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    max_running = BatchConfig().max_running          # the default; the server is left at it
    with tempfile.TemporaryDirectory(prefix="batch-yield-") as folder:
        env = {BATCH_ENV_PREFIX + "DIR": folder}
        with spawned(args.model_dir, env, "batch_yield") as (endpoint, server):
            api = BatchApi(endpoint.target.host, endpoint.target.port)
            rows, cells = [], [0]
            for r in range(args.rounds):
                rows += one_round(endpoint, api, r, args, cells, max_running)
            print(json.dumps(summary(rows, args.streams, max_running)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
