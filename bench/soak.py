"""Soak: minutes of mixed traffic against a real server; memory, statuses and blocks after.

    python bench/soak.py [--minutes 10] [--workers 8] [--seed 1] [--model-dir DIR]
    make soak [SOAK_MINUTES=10]

Starts `tlserve.py --config runtime.toml` in a child process (bench/pressure.py's Server);
`--workers` threads each pick, seeded, one of: a streamed chat, a plain chat, a completion,
an embeddings call, a stream cut with TCP RST after its first chunk, a body that is not
JSON, a bad value, or a slow client (request sent in pieces, answer read slowly). A
sampler reads the server's RSS every `RSS_INTERVAL_S`. Prints one JSON line: RSS over time
(MiB), its growth after the warm-up (the first `WARMUP_SHARE` of the run), requests by
kind and status, the unexpected ones (a 5xx, or a valid request not answered 200/429), and
the blocks in use once the traffic has stopped. Targets: growth < 5%, 0 unexpected, 0 blocks.
"""
from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.child_server import Server, idle_after, rss_mib, served_model  # noqa: E402

RSS_INTERVAL_S = 5.0
WARMUP_SHARE = 0.3               # RSS growth is measured from the first sample after this share
MAX_RSS_GROWTH = 0.05
SLOW_PIECE_BYTES = 16            # a slow client sends its request this many bytes at a time
SLOW_PAUSE_S = 0.05
IDLE_WITHIN_S = 10.0
REPLY_TIMEOUT_S = 300.0
KINDS = ("chat_stream", "chat", "completion", "embeddings", "disconnect", "bad_json",
         "bad_value", "slow_client")
EXPECTED = {"bad_json": {400}, "bad_value": {400}}            # the rest: 200, or 429 when full


def http_request(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def request_for(kind: str, model: str, rng: random.Random) -> tuple[str, bytes]:
    chat = {"model": model, "max_tokens": rng.randint(4, 24),
            "messages": [{"role": "user", "content": f"Say something about {rng.random()}"}]}
    if kind in ("chat_stream", "disconnect"):
        return "/v1/chat/completions", json.dumps({**chat, "stream": True}).encode()
    if kind in ("chat", "slow_client"):
        return "/v1/chat/completions", json.dumps(chat).encode()
    if kind == "completion":
        return "/v1/completions", json.dumps({"model": model, "prompt": "Once upon a time",
                                              "max_tokens": rng.randint(4, 24)}).encode()
    if kind == "embeddings":
        inputs = [f"document {rng.random()}" for _ in range(rng.randint(1, 32))]
        return "/v1/embeddings", json.dumps({"model": model, "input": inputs}).encode()
    if kind == "bad_json":
        return "/v1/chat/completions", b'{"model": ' + model.encode() + b', "messages": ['
    return "/v1/chat/completions", json.dumps({**chat, "temperature": 9}).encode()


def one(addr: tuple[str, int], kind: str, model: str, rng: random.Random) -> str:
    """Run one request of `kind`; its status as text ("closed" when none came back)."""
    path, body = request_for(kind, model, rng)
    data = http_request(path, body)
    with socket.create_connection(addr, timeout=REPLY_TIMEOUT_S) as sock:
        if kind == "slow_client":
            for at in range(0, len(data), SLOW_PIECE_BYTES):
                sock.sendall(data[at:at + SLOW_PIECE_BYTES])
                time.sleep(SLOW_PAUSE_S)
        else:
            sock.sendall(data)
        received = b""
        while b"\r\n" not in received or (kind == "disconnect" and b"data: " not in received):
            chunk = sock.recv(1024 if kind == "slow_client" else 65536)
            if not chunk:
                break
            received += chunk
        status = received[9:12].decode() if received.startswith(b"HTTP/1.1 ") else "closed"
        if kind == "disconnect":                 # RST: the server must free it within a step
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return status
        while True:                              # read the rest (slowly for a slow client)
            chunk = sock.recv(256 if kind == "slow_client" else 65536)
            if not chunk:
                return status
            if kind == "slow_client":
                time.sleep(SLOW_PAUSE_S / 5)


def soak(server: Server, seconds: float, workers: int, seed: int) -> dict:
    model, stop = served_model(server), threading.Event()
    counts, lock, samples = Counter(), threading.Lock(), []
    started = time.monotonic()

    def worker(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        while not stop.is_set():
            kind = rng.choice(KINDS)
            try:
                status = one(server.http, kind, model, rng)
            except OSError as exc:
                status = type(exc).__name__
            with lock:
                counts[(kind, status)] += 1

    def sampler() -> None:
        while not stop.is_set():
            samples.append((round(time.monotonic() - started, 1), round(rss_mib(server.proc.pid), 1)))
            stop.wait(RSS_INTERVAL_S)
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
    threads.append(threading.Thread(target=sampler, daemon=True))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(REPLY_TIMEOUT_S)
    samples.append((round(time.monotonic() - started, 1), round(rss_mib(server.proc.pid), 1)))
    return {"counts": counts, "samples": samples, "model": model}


def report(run: dict, seconds: float, idle: dict, log: list[str], code: int) -> dict:
    counts, samples = run["counts"], run["samples"]
    unexpected = {f"{kind} {status}": n for (kind, status), n in counts.items()
                  if status.startswith("5") or (kind != "disconnect" and status not in
                                                {str(s) for s in EXPECTED.get(kind, {200, 429})})}
    warm = [rss for t, rss in samples if t >= seconds * WARMUP_SHARE] or [samples[-1][1]]
    growth = (warm[-1] - warm[0]) / warm[0] if warm[0] else 0.0
    result = {"seconds": seconds, "requests": sum(counts.values()),
              "by_kind_and_status": {f"{k} {s}": n for (k, s), n in sorted(counts.items())},
              "unexpected": unexpected, "rss_mib": samples, "rss_after_warmup_mib": [warm[0], warm[-1]],
              "rss_growth": round(growth, 4), "idle_after": idle, "server_exit_code": code,
              "tracebacks_in_log": sum("Traceback" in line for line in log)}
    result["ok"] = (growth < MAX_RSS_GROWTH and not unexpected and idle["used_blocks"] == 0
                    and idle["active_sequences"] == 0 and result["tracebacks_in_log"] == 0)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seconds", type=float, help="overrides --minutes (a quick check)")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model-dir")
    args = p.parse_args()
    seconds = args.seconds or args.minutes * 60
    server = Server(args.model_dir, {})
    try:
        run = soak(server, seconds, args.workers, args.seed)
        idle = idle_after(server, IDLE_WITHIN_S)
    finally:
        code = server.stop()
    result = report(run, seconds, idle, server.log, code)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
