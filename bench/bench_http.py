"""Requests/s of `GET /v1/models` with keep-alive: our EventLoop vs the stdlib ThreadingHTTPServer.

    python bench/bench_http.py [--seconds 2] [--rounds 2] [--connections 16]

Both servers answer the same bytes (a fixed OpenAI models document) on 127.0.0.1, one after
the other in this process, in alternating rounds (the best round of each is compared, so a
noisy neighbour on a shared machine hurts both alike). The load comes from a separate client process (so it does not
share this interpreter's GIL) that keeps `--connections` persistent raw sockets busy with
one request in flight each (no pipelining) and counts complete responses. Prints a table,
then one JSON line per server and one for the ratio (target: EventLoop >= 2x).
"""
from __future__ import annotations

import argparse
import json
import re
import selectors
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.http.loop import EventLoop, Listener           # noqa: E402
from server.http.protocol import Response                  # noqa: E402

MODELS_BODY = json.dumps({"object": "list", "data": [
    {"id": "smol-135m", "object": "model", "created": 1700000000, "owned_by": "tl-serve"}]}).encode()
REQUEST = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")


class ModelsApp:
    def handle(self, request):
        return Response(status=200, headers=(("Content-Type", "application/json"),), body=MODELS_BODY)


class ModelsHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"                     # keep-alive
    # Head and body leave in two writes; without TCP_NODELAY the second waits for the
    # client's delayed ACK (~40 ms) and the stdlib would lose by 20x for the wrong reason.
    disable_nagle_algorithm = True

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(MODELS_BODY)))
        self.end_headers()
        self.wfile.write(MODELS_BODY)

    def log_message(self, format, *args):             # no per-request stderr line
        pass


class QuietThreadingHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):   # the client hangs up mid-request at the end
        pass


# ---- the client (runs in a subprocess) -----------------------------------------------------

def run_client(port: int, num_connections: int, warmup_s: float, seconds: float) -> dict:
    selector = selectors.DefaultSelector()
    buffers = {}
    for _ in range(num_connections):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        buffers[sock] = b""
        sock.send(REQUEST)
    count, errors = 0, 0
    start = time.perf_counter()
    measure_from, end = start + warmup_s, start + warmup_s + seconds
    counted_from = None
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if counted_from is None and now >= measure_from:
            counted_from, count = now, 0
        for key, _ in selector.select(0.5):
            sock = key.fileobj
            data = sock.recv(65536)
            if not data:
                errors += 1
                selector.unregister(sock)
                continue
            buf = buffers[sock] + data
            while True:
                head_end = buf.find(b"\r\n\r\n")
                if head_end < 0:
                    break
                match = _CONTENT_LENGTH.search(buf, 0, head_end + 2)
                total = head_end + 4 + int(match.group(1))
                if len(buf) < total:
                    break
                if not buf.startswith(b"HTTP/1.1 200"):
                    errors += 1
                buf = buf[total:]
                count += 1
                sock.send(REQUEST)
            buffers[sock] = buf
    elapsed = time.perf_counter() - (counted_from or start)
    return {"requests": count, "seconds": elapsed, "errors": errors}


def measure(port: int, args) -> dict:
    out = subprocess.run([sys.executable, __file__, "--client", str(port),
                          "--connections", str(args.connections), "--seconds", str(args.seconds),
                          "--warmup", str(args.warmup)], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    result["requests_per_s"] = result["requests"] / result["seconds"]
    return result


# ---- the servers -----------------------------------------------------------------------------

def bench_event_loop(args) -> dict:
    loop = EventLoop([Listener("api", "127.0.0.1:0", ModelsApp(), True)])
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        return measure(loop.bound_address("api")[1], args)
    finally:
        loop.stop()
        thread.join(10)


def bench_stdlib(args) -> dict:
    server = QuietThreadingHTTPServer(("127.0.0.1", 0), ModelsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        return measure(server.server_address[1], args)
    finally:
        server.shutdown()
        server.server_close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="measured seconds per round")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per server")
    parser.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds first")
    parser.add_argument("--connections", type=int, default=16, help="persistent client sockets")
    parser.add_argument("--client", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client is not None:
        print(json.dumps(run_client(args.client, args.connections, args.warmup, args.seconds)))
        return 0
    rounds = {"event_loop": [], "threading_http_server": []}
    for _ in range(args.rounds):                      # alternate, so noise hits both alike
        rounds["event_loop"].append(bench_event_loop(args))
        rounds["threading_http_server"].append(bench_stdlib(args))
    best = {name: max(results, key=lambda r: r["requests_per_s"]) for name, results in rounds.items()}
    ratio = best["event_loop"]["requests_per_s"] / best["threading_http_server"]["requests_per_s"]
    print(f"GET /v1/models, keep-alive, {args.connections} connections, "
          f"{args.rounds} rounds x {args.seconds:g} s per server (best round shown)")
    print(f"{'server':<28}{'best req/s':>12}{'all rounds req/s':>28}{'errors':>8}")
    for name, label in (("event_loop", "tl-serve EventLoop"),
                        ("threading_http_server", "stdlib ThreadingHTTPServer")):
        each = " ".join(f"{r['requests_per_s']:.0f}" for r in rounds[name])
        errors = sum(r["errors"] for r in rounds[name])
        print(f"{label:<28}{best[name]['requests_per_s']:>12.0f}{each:>28}{errors:>8}")
    print(f"ratio: {ratio:.2f}x (target >= 2x)")
    for name, results in rounds.items():
        for index, result in enumerate(results):
            print(json.dumps({"bench": "http_models_keepalive", "server": name, "round": index,
                              "connections": args.connections, **result}))
    print(json.dumps({"bench": "http_models_keepalive", "ratio": round(ratio, 3), "target": 2.0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
