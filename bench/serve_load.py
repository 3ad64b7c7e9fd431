"""Serving benchmark over HTTP: streaming load at several concurrencies, the serving overhead
against the offline engine, and `GET /v1/models` against the stdlib server.

    python bench/serve_load.py [--quick] [--max-tokens 128] [--concurrency 1,16,64]
                               [--trace-file PATH] [--no-engine-view]

1. Streams: N client threads each send one streaming chat request (a ~64-token prompt,
   `ignore_eos`, temperature 0) to the real server (smol-135m) and time every SSE chunk:
   aggregate output tok/s, time to first token and inter-token latency p50/p99.
2. Overhead: the same 16 requests through `Engine.step()` directly in this process
   (offline) vs through HTTP at 16 streams; target HTTP >= 0.9x offline.
3. `GET /v1/models` with keep-alive on the full API app vs `http.server.ThreadingHTTPServer`
   answering the same bytes, measured in one run by bench/bench_http.py's client process;
   target >= 2x.

`--trace-file PATH` serves with the step trace on, `--no-engine-view` with the engine view
off (the engine then records nothing per step): run once with and once without to see what
each costs. Prints a table, then one JSON line per case. Never run by the tests.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench.load_client import percentile                             # noqa: E402
from engine.api import Engine, EngineConfig, GenRequest, SamplingParams, load_model, tune_malloc   # noqa: E402
from cli.fetch import DEFAULT_DEST                              # noqa: E402
from server.config import ServeConfig                              # noqa: E402
from server.serve import spawn                                     # noqa: E402

MODEL_DIR = ROOT / DEFAULT_DEST                   # the repository's fetched model
BASE_PROMPT = ("You are reviewing a short story about a lighthouse keeper who finds a message "
               "in a bottle. Summarise the plot, name the main character, and suggest a title")


def prompt_for(i: int) -> str:
    return f"Request {i}. {BASE_PROMPT}."


def stream_one(host: str, port: int, i: int, max_tokens: int, out: list) -> None:
    body = json.dumps({"model": "smol-135m", "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "messages": [{"role": "user", "content": prompt_for(i)}]}).encode()
    sent = time.perf_counter()
    times: list[float] = []
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                     + body)
        buf = b""
        while True:
            data = sock.recv(65536)
            if not data:
                break
            now = time.perf_counter()
            buf += data
            # every content chunk is one token here (one TokenOut -> one chunk)
            n_content = buf.count(b'"delta":{"content"')
            times += [now] * (n_content - len(times))
            if b"data: [DONE]" in buf:
                break
    out.append((sent, times))


def run_streams(handle, concurrency: int, max_tokens: int) -> dict:
    """Run the client in a subprocess so it never competes for this interpreter's GIL."""
    import subprocess
    host, port = handle.http_addr.rsplit(":", 1)
    out = subprocess.run([sys.executable, __file__, "--stream-client", host, port,
                          str(concurrency), str(max_tokens)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def stream_client(host: str, port: int, concurrency: int, max_tokens: int) -> dict:
    results: list = []
    threads = [threading.Thread(target=stream_one, args=(host, port, i, max_tokens, results))
               for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    tokens = sum(len(times) for _, times in results)
    ttft = [times[0] - sent for sent, times in results if times]
    itl = [b - a for _, times in results for a, b in zip(times, times[1:])]
    return {"case": f"http_streams_{concurrency}", "concurrency": concurrency,
            "output_tokens": tokens, "wall_s": round(wall, 3),
            "tok_per_s": round(tokens / wall, 2),
            "ttft_p50_s": round(percentile(ttft, 50), 4), "ttft_p99_s": round(percentile(ttft, 99), 4),
            "itl_p50_s": round(percentile(itl, 50), 4), "itl_p99_s": round(percentile(itl, 99), 4)}


def offline(model, engine_cfg: EngineConfig, concurrency: int, max_tokens: int) -> dict:
    from server.text.messages import Message
    from server.text.served import ServedModel
    served = ServedModel(model, "smol-135m", model.config.max_position_embeddings)
    engine = Engine(model, engine_cfg)
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    for i in range(concurrency):
        ids = served.encode(served.render((Message("user", prompt_for(i)),)))
        engine.add_request(GenRequest(prompt=tuple(ids), params=params, max_tokens=max_tokens))
    start, tokens = time.perf_counter(), 0
    while engine.has_work():
        tokens += sum(1 for o in engine.step() if o.token is not None)
    wall = time.perf_counter() - start
    return {"case": f"offline_engine_{concurrency}", "concurrency": concurrency,
            "output_tokens": tokens, "wall_s": round(wall, 3), "tok_per_s": round(tokens / wall, 2)}


def models_rps(handle, seconds: float) -> dict:
    import bench_http
    args = argparse.Namespace(connections=16, seconds=seconds, warmup=0.5)
    ours = bench_http.measure(int(handle.http_addr.rsplit(":", 1)[1]), args)
    stdlib = bench_http.bench_stdlib(args)
    return {"case": "get_models_keepalive", "tl_serve_rps": round(ours["requests_per_s"], 1),
            "stdlib_rps": round(stdlib["requests_per_s"], 1),
            "ratio": round(ours["requests_per_s"] / stdlib["requests_per_s"], 2)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", default=str(MODEL_DIR))
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--models-seconds", type=float, default=3.0)
    p.add_argument("--quick", action="store_true", help="32 tokens, concurrency 1,16, 1.5 s")
    p.add_argument("--trace-file", metavar="PATH", default="",
                   help="serve with the step trace written here (measures its cost)")
    p.add_argument("--no-engine-view", action="store_true",
                   help="serve with [engine].engine_view = false")
    p.add_argument("--stream-client", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.stream_client:
        host, port, n, m = args.stream_client
        print(json.dumps(stream_client(host, int(port), int(n), int(m))))
        return 0
    if args.quick:
        args.max_tokens, args.concurrency, args.models_seconds = 32, "1,16", 1.5
    levels = [int(x) for x in args.concurrency.split(",")]
    engine_cfg = EngineConfig()          # the served default: 64 streams fit without preemption
    rows = []
    handle = spawn(ServeConfig.for_model(args.model_dir, engine=engine_cfg,
                                         trace_file=args.trace_file,
                                         engine_view=not args.no_engine_view))
    try:
        run_streams(handle, 2, 4)                                   # warm-up
        rows += [run_streams(handle, n, args.max_tokens) for n in levels]
        rows.append(models_rps(handle, args.models_seconds))
    finally:
        handle.stop()
    tune_malloc()                   # as the server's start-up does
    model = load_model(args.model_dir)
    rows.append(offline(model, engine_cfg, 16, args.max_tokens))
    http16 = next((r for r in rows if r["case"] == "http_streams_16"), None)
    if http16:
        rows.append({"case": "serving_overhead_16",
                     "http_over_offline": round(http16["tok_per_s"] / rows[-1]["tok_per_s"], 3),
                     "target": 0.9})
    print(f"{'case':<24}{'tok/s':>9}{'TTFT p50':>10}{'TTFT p99':>10}{'ITL p50':>9}{'ITL p99':>9}")
    for r in rows:
        if "tok_per_s" in r:
            print(f"{r['case']:<24}{r['tok_per_s']:>9}{r.get('ttft_p50_s', ''):>10}"
                  f"{r.get('ttft_p99_s', ''):>10}{r.get('itl_p50_s', ''):>9}{r.get('itl_p99_s', ''):>9}")
    for r in rows:
        print(json.dumps(r))
    print(json.dumps({"case": "settings", "trace_file": args.trace_file,
                      "engine_view": not args.no_engine_view}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
