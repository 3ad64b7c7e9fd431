"""Hostile input at scale against a real server: N seeded malformed requests.

    python bench/fuzz_http.py [--requests 10000] [--seed 9] [--model-dir DIR]

Starts `tlserve.py --config runtime.toml` in a child process (bench/pressure.py's Server),
sends every case of tests/fuzz_http.py's seeded generator on its own connection, and prints
one JSON line: answers by status, cases that got anything but a 4xx (505 for a foreign HTTP
version) or a close, whether the server still answers a chat, /healthz and /metrics after,
its tracebacks and ERROR lines, and its exit code. Exit 0 when all of that is clean.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.child_server import Server, served_model        # noqa: E402
from tests.fuzz_http import Fuzzer, send_case          # noqa: E402


def acceptable(kind: str, status: int | None) -> bool:
    return status is None or 400 <= status < 500 or (kind == "request_line" and status == 505)


def still_serving(server: Server, model: str) -> bool:
    body = json.dumps({"model": model, "max_tokens": 2, "messages": [
        {"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(f"http://{server.http[0]}:{server.http[1]}"
                                     "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as r:
        chat_ok = r.status == 200
    for path in ("/healthz", "/metrics"):
        with urllib.request.urlopen(server.health + path, timeout=10) as r:
            chat_ok = chat_ok and r.status == 200
    return chat_ok


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=9)
    p.add_argument("--model-dir")
    args = p.parse_args()
    server = Server(args.model_dir, {})
    findings, verdicts, hangs = [], Counter(), 0
    started = time.monotonic()
    try:
        model = served_model(server)
        fuzzer = Fuzzer(args.seed, model)
        for index in range(args.requests):
            case = fuzzer.case()
            try:
                status = send_case(server.http, case)
            except TimeoutError:
                status, hangs = "hang", hangs + 1
            verdicts[f"{case.kind} {status}"] += 1
            if status == "hang" or not acceptable(case.kind, status):
                findings.append({"index": index, "kind": case.kind, "status": status,
                                 "request": case.data[:200].decode("latin-1")})
        alive = still_serving(server, model)
    finally:
        code = server.stop()
    log_errors = [line for line in server.log if "Traceback" in line or '"ERROR' in line
                  or " ERROR " in line]
    result = {"requests": args.requests, "seed": args.seed,
              "seconds": round(time.monotonic() - started, 1), "hangs": hangs,
              "verdicts": dict(sorted(verdicts.items())), "findings": findings[:20],
              "num_findings": len(findings), "serving_after": alive,
              "log_errors": log_errors[:10], "server_exit_code": code}
    result["ok"] = not findings and alive and not log_errors and code == 0
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
