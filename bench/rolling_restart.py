"""Zero-failure rolling restart behind HAProxy: N tl-serve replicas, C streaming clients.

    python bench/rolling_restart.py                      # 3 replicas of smol-135m, 32 clients, 60 s
    python bench/rolling_restart.py --quick              # the succ test model, 4 clients, ~20 s
    python bench/rolling_restart.py --config deploy/haproxy/cache-aware.cfg   # cache-aware routing

1. Finds HAProxy (Debian's 2.6 package), installing it with apt-get when it is missing and
   this process may; starts N replicas (`tlserve.py`, each on its own API and health port)
   and HAProxy with deploy/haproxy/haproxy.cfg (addresses through its environment).
2. C client threads send streaming chat requests through HAProxy back to back and check
   each answer: status 200, a finish_reason, `data: [DONE]`. Anything else is a failure
   (no 200, a connection error) or a truncation (200, but the stream ended early).
3. After a steady window, every replica in turn is restarted: SIGTERM (it drains: /readyz
   503, HAProxy marks it DOWN, in-flight streams finish), wait for the exit, start it again,
   wait for /readyz 200. The clients keep running throughout.
4. Reports requests, failures, truncations and the aggregate output tokens/s during the
   restarts against the steady window; one JSON line at the end. Exit 1 if any request
   failed or was truncated (the target is 0). Each failure or truncation says why it ended
   (status, bytes and events received, the last event, seconds since it was sent), and any
   replica that cut streams at its drain timeout is named from its log.

Timeouts (tests/deploy/test_haproxy.py checks them): a replica's drain must outlast the
longest stream it holds, or the streams still running at the deadline are cut after their
200 (a truncation HAProxy cannot retry). On a loaded 2-core machine a 64-token stream among
16 runs for a minute or more, and a request admitted just before SIGTERM may first wait up
to the queue deadline (120 s) for a batch slot, so the drain gets that plus a generation
budget. The client's read timeout covers the same silence: no head until the first token.

Never run by the tests.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.child_server import free_port  # noqa: E402  (shared)

HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
OUT = ROOT / "bench" / "out"
READY_TIMEOUT_S = 180
QUEUE_DEADLINE_S = 120.0             # the replicas' queue_deadline_ms (the default)
GENERATION_BUDGET_S = 180.0          # one bench stream's tokens on a loaded 2-core machine
DRAIN_TIMEOUT_S = QUEUE_DEADLINE_S + GENERATION_BUDGET_S   # each replica's drain_timeout_s
CLIENT_TIMEOUT_S = QUEUE_DEADLINE_S + 60.0                 # longest silence a stream may have
STOP_MARGIN_S = 30.0                 # after the drain: engine stop and exit
DRAIN_CUT = "drain timeout: cancelling"                    # the loop's log line
MAX_TOKENS = 64                      # per request (--max-tokens)


def find_haproxy() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists()
                                        else None)
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("installing haproxy with apt-get ...", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], env=env, check=False, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "haproxy"], env=env, check=True,
                       capture_output=True)
        return shutil.which("haproxy") or "/usr/sbin/haproxy"
    sys.exit("rolling_restart: haproxy is not installed (apt-get install haproxy)")


def get_status(port: int, path: str) -> int | None:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", path)
        status = conn.getresponse().status
        conn.close()
        return status
    except OSError:
        return None


@dataclass
class Replica:
    name: str
    model_dir: str
    api_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    log_start_bytes: int = 0             # the log is appended to: this run starts here

    @property
    def log_path(self) -> Path:
        return OUT / f"rolling_{self.name}.log"

    def drain_cuts(self) -> list[str]:
        """This run's "drain timeout: cancelling N open responses" lines."""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_start_bytes)
            text = f.read().decode("utf-8", "replace")
        return [ln for ln in text.splitlines() if DRAIN_CUT in ln]

    def start(self) -> None:
        env = {**os.environ, "TL_ENGINE__HTTP_LISTEN": f"127.0.0.1:{self.api_port}",
               "TL_ENGINE__HEALTH_LISTEN": f"127.0.0.1:{self.health_port}",
               "TL_ENGINE__ACCESS_LOG": "off", "TL_ENGINE__MAX_NUM_SEQS": "16",
               "TL_ENGINE__DRAIN_TIMEOUT_S": str(DRAIN_TIMEOUT_S),
               "TL_ENGINE__QUEUE_DEADLINE_MS": str(int(QUEUE_DEADLINE_S * 1000))}
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tlserve.py"), "--model-dir",
                                      self.model_dir], env=env, stdout=log, stderr=log)

    def wait_ready(self) -> float:
        t0 = time.monotonic()
        while get_status(self.health_port, "/readyz") != 200:
            if self.proc.poll() is not None:
                sys.exit(f"replica {self.name} exited with {self.proc.returncode}; "
                         f"see bench/out/rolling_{self.name}.log")
            if time.monotonic() - t0 > READY_TIMEOUT_S:
                sys.exit(f"replica {self.name} not ready after {READY_TIMEOUT_S} s")
            time.sleep(0.1)
        return time.monotonic() - t0

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(DRAIN_TIMEOUT_S + STOP_MARGIN_S)


@dataclass
class Tally:
    """What the clients saw; appended from many threads (list.append is atomic)."""
    token_times: list[float] = field(default_factory=list)
    ok: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)


@dataclass
class Reading:
    """One request as the client saw it: enough to say why it ended."""
    sent_s: float
    status: int | None = None
    bytes_received: int = 0
    num_events: int = 0
    last_event: str = "(none)"
    finished: bool = False              # a choice carried a finish_reason
    done: bool = False                  # data: [DONE]

    def why(self, ended: str) -> str:
        return (f"{ended}: status {self.status}, {self.bytes_received} bytes, "
                f"{self.num_events} events, finish={self.finished} done={self.done}, "
                f"last event ...{self.last_event[-100:]!r}, after "
                f"{time.monotonic() - self.sent_s:.1f} s")


def read_stream(response: http.client.HTTPResponse, seen: Reading, tally: Tally) -> None:
    for raw in response:
        seen.bytes_received += len(raw)
        line = raw.decode("utf-8", "replace").strip()
        if not line:
            continue
        seen.num_events += line.startswith("data: ")
        seen.last_event = line
        if line == "data: [DONE]":
            seen.done = True
        elif line.startswith("data: "):
            choice = (json.loads(line[6:]).get("choices") or [{}])[0]
            if choice.get("delta", {}).get("content"):
                tally.token_times.append(time.monotonic())
            seen.finished = seen.finished or choice.get("finish_reason") is not None


def one_request(port: int, body: bytes, tally: Tally) -> None:
    seen = Reading(sent_s=time.monotonic())
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
        conn.request("POST", "/v1/chat/completions", body,
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        seen.status = response.status
        if response.status != 200:
            seen.last_event = response.read()[:200].decode("utf-8", "replace")
            tally.failed.append(seen.why("not 200"))
            return
        read_stream(response, seen, tally)
        conn.close()
        (tally.ok.append(time.monotonic()) if seen.finished and seen.done else
         tally.truncated.append(seen.why("ended early (EOF)")))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        where = tally.truncated if seen.status == 200 else tally.failed
        where.append(seen.why(f"{type(exc).__name__}: {exc}"))


def client(port: int, body: bytes, stop: threading.Event, tally: Tally) -> None:
    while not stop.is_set():
        one_request(port, body, tally)


def rate(times: list[float], start: float, end: float) -> float:
    return sum(start <= t < end for t in times) / max(end - start, 1e-9)


def quick_model() -> str:
    from tests.models import write_succ_model
    return str(write_succ_model(Path(tempfile.mkdtemp(prefix="rolling-")) / "succ"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="the succ test model, 4 clients, 20 s")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--clients", type=int, default=None, help="default 32 (--quick: 4)")
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--steady-s", type=float, default=15.0, help="steady window before restarts")
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    p.add_argument("--model-dir", default=str(ROOT / "artifacts" / "models" / "smol-135m"))
    p.add_argument("--config", default=str(HAPROXY_CFG), help="HAProxy's configuration file")
    args = p.parse_args()
    if args.quick:
        args.clients = args.clients or 4
        args.duration_s, args.steady_s, args.max_tokens = 20.0, 4.0, 16
        args.model_dir = quick_model()
    args.clients = args.clients or 32
    if args.replicas != 3:
        sys.exit("the configs in deploy/haproxy/ name three servers: --replicas 3")
    OUT.mkdir(parents=True, exist_ok=True)
    haproxy = find_haproxy()
    model_id = "succ" if args.quick else Path(args.model_dir).name
    replicas = [Replica(f"r{i + 1}", args.model_dir) for i in range(args.replicas)]
    for r in replicas:
        r.log_start_bytes = r.log_path.stat().st_size if r.log_path.exists() else 0
        r.start()
    for r in replicas:
        r.wait_ready()
    lb_port = free_port()
    env = {**os.environ, "TL_LB_BIND": f"127.0.0.1:{lb_port}",
           **{f"TL_R{i + 1}_API": f"127.0.0.1:{r.api_port}" for i, r in enumerate(replicas)},
           **{f"TL_R{i + 1}_HEALTH_PORT": str(r.health_port) for i, r in enumerate(replicas)}}
    lb = subprocess.Popen([haproxy, "-db", "-f", args.config], env=env,
                          stdout=open(OUT / "rolling_haproxy.log", "ab"), stderr=subprocess.STDOUT)
    while get_status(lb_port, "/healthz") != 200:
        time.sleep(0.1)
    body = json.dumps({"model": model_id, "stream": True, "max_tokens": args.max_tokens,
                       "ignore_eos": True, "temperature": 0,
                       "messages": [{"role": "user", "content": "a" if args.quick else
                                     "Tell me about lighthouses."}]}).encode()
    tally, stop = Tally(), threading.Event()
    threads = [threading.Thread(target=client, args=(lb_port, body, stop, tally), daemon=True)
               for _ in range(args.clients)]
    t_start = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(args.steady_s)
    restart_start = time.monotonic()
    for r in replicas:
        t_term = time.monotonic()
        code = r.stop()
        drain_s = time.monotonic() - t_term
        r.start()
        print(f"{r.name}: drained in {drain_s:.1f} s (exit {code}), ready again in "
              f"{r.wait_ready():.1f} s", flush=True)
    restart_end = time.monotonic()
    time.sleep(max(0.0, t_start + args.duration_s - time.monotonic()))
    stop.set()
    for t in threads:
        t.join(CLIENT_TIMEOUT_S)
    t_end = time.monotonic()
    for r in replicas:
        r.stop()
    lb.terminate()
    lb.wait(10)
    # the steady window starts at the first token: the cold start (every client's prefill
    # at once) is not steady state, and counting it made restarts look faster than steady
    first_token_s = min(tally.token_times, default=restart_start)
    steady = rate(tally.token_times, first_token_s, restart_start)
    during = rate(tally.token_times, restart_start, restart_end)
    result = {"replicas": args.replicas, "clients": args.clients, "model": model_id,
              "duration_s": round(t_end - t_start, 1),
              "restart_s": round(restart_end - restart_start, 1),
              "steady_window_s": round(max(0.0, restart_start - first_token_s), 1),
              "requests_ok": len(tally.ok), "failed": len(tally.failed),
              "truncated": len(tally.truncated), "steady_tok_s": round(steady, 1),
              "restart_tok_s": round(during, 1),
              "restart_vs_steady": round(during / steady, 3) if steady else None}
    for problem in tally.failed[:10]:
        print("failed:", problem)
    for problem in tally.truncated[:10]:
        print("truncated:", problem)
    for r in replicas:
        for line in r.drain_cuts():
            print(f"{r.name} cut streams at its drain timeout ({DRAIN_TIMEOUT_S:.0f} s): {line}")
    print(f"requests ok {result['requests_ok']}, failed {result['failed']}, truncated "
          f"{result['truncated']}; tok/s steady {result['steady_tok_s']}, during restarts "
          f"{result['restart_tok_s']} ({result['restart_vs_steady']}x)")
    print(json.dumps(result))
    return 0 if not tally.failed and not tally.truncated else 1


if __name__ == "__main__":
    sys.exit(main())
