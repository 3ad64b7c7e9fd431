"""`h2load --h1` (Debian's nghttp2-client, `make bench-deps`) as a C load client: a cross-check
of bench/load_client.py's tokens/s and time to first byte.

h2load sends the same body on every request of a run (one prompt for all: a prefix cache
makes it easier than the Python client's distinct prompts; a caller that runs it again
gives it a new body, since a body answered once is drafted from the suffix store the next
time, and `combined` sums the runs) and knows nothing of SSE, so tokens/s is
requests done x max_tokens (`ignore_eos`) / the whole run, the first round's prefill
included, and its "time to 1st byte" is TTFT only where the server sends its head with the
first token (ours does; others may send it earlier).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

from bench.load_client import Target

FINISHED = re.compile(r"finished in ([\d.]+)(us|ms|s),")
REQUESTS = re.compile(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed")
FIRST_BYTE = re.compile(r"time to 1st byte:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)")
UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def available() -> bool:
    return shutil.which("h2load") is not None


def parse(text: str, max_tokens: int) -> dict:
    """h2load's report -> tok/s, requests, time to first byte (min/max/mean, seconds)."""
    finished, requests, first = FINISHED.search(text), REQUESTS.search(text), FIRST_BYTE.search(text)
    if not (finished and requests):
        raise ValueError("unexpected h2load output:\n" + text)
    wall_s = float(finished.group(1)) * UNIT_S[finished.group(2)]
    succeeded, failed = int(requests.group(3)), int(requests.group(4))
    out = {"wall_s": round(wall_s, 2), "tok_s": round(succeeded * max_tokens / wall_s, 1),
           "requests_ok": succeeded, "requests_failed": failed}
    if first:
        values = [float(first.group(i)) * UNIT_S[first.group(i + 1)] for i in (1, 3, 5)]
        out.update(ttfb_min_s=round(values[0], 4), ttfb_max_s=round(values[1], 4),
                   ttfb_mean_s=round(values[2], 4))
    return out


def combined(runs: list[dict], max_tokens: int) -> dict:
    """Several runs one after another -> one row: tokens over their summed wall time, the
    first byte's min / max over all of them and its mean weighted by each run's requests."""
    wall_s = sum(r["wall_s"] for r in runs)
    ok = sum(r["requests_ok"] for r in runs)
    out = {"wall_s": round(wall_s, 2),
           "tok_s": round(ok * max_tokens / wall_s, 1) if wall_s else 0.0,
           "requests_ok": ok, "requests_failed": sum(r["requests_failed"] for r in runs)}
    if runs and all("ttfb_mean_s" in r for r in runs):
        out.update(ttfb_min_s=min(r["ttfb_min_s"] for r in runs),
                   ttfb_max_s=max(r["ttfb_max_s"] for r in runs),
                   ttfb_mean_s=round(sum(r["ttfb_mean_s"] * r["requests_ok"] for r in runs)
                                     / max(ok, 1), 4))
    return out


def run(target: Target, body: bytes, concurrency: int, requests: int, max_tokens: int,
        timeout_s: float) -> dict:
    """`requests` requests over `concurrency` keep-alive HTTP/1.1 connections."""
    with tempfile.NamedTemporaryFile(suffix=".json") as data:
        data.write(body)
        data.flush()
        command = ["h2load", "--h1", "-n", str(requests), "-c", str(concurrency),
                   "-d", data.name, "-H", "Content-Type: application/json",
                   f"http://{target.host}:{target.port}{target.path}"]
        for line in target.headers.decode().splitlines():
            command += ["-H", line]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode:
        raise SystemExit(f"h2load failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return parse(done.stdout, max_tokens)
