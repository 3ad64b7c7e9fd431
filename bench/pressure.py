"""Graceful under pressure: bursts, a disconnect storm and a drain against a real server.

    python bench/pressure.py burst  [--streams 256] [--idle 1000] [--tokens 32]
    python bench/pressure.py openai [--chats 512] [--tokens 32] [--retries 5]
    python bench/pressure.py storm  [--streams 64]
    python bench/pressure.py drain  [--streams 48] [--tokens 64]
    python bench/pressure.py embeddings [--inputs 300] [--gap-inputs 256]
    python bench/pressure.py lockout [--clients 300] [--trickle-s 120] [--tokens 1024]
    (each: [--model-dir DIR] [--env KEY=VALUE ...] for TL_ENGINE__ overrides,
     [--repo DIR] to run another checkout's tlserve.py: a before/after in one command)

Each scenario starts `tlserve.py --config runtime.toml` (the defaults) on free ports in a
child process, drives it from threads in this one, and prints one JSON line:

* burst: N simultaneous streaming chats while `--idle` keep-alive connections sit open and a
  prober reads /healthz and /metrics every 200 ms; all must reach [DONE], the probes answer
  within 1 s, and afterwards 0 active sequences and 0 used blocks.
* openai: N chats through the official openai client (max_retries) at once; refused ones
  come back after Retry-After; all must succeed.
* storm: N streams cut with TCP RST after their first chunk; every sequence and block must
  be free within 2 s.
* drain: SIGTERM with N streams in flight: all reach [DONE], new connections are refused,
  the exit status is 0; prints the drain time (the figure `drain_timeout_s` is sized from).
* lockout: N streamed chats within 2 s, each cut after its first token (a load test, an
  impatient proxy: none finishes, so the server stays cold); of those refused, half leave
  for good and half come back after Retry-After; then one new client a second, plain chats
  whose `max_tokens` is far above the answer (it ends at EOS). Every new client that arrives
  once the burst has drained must be served at its first try (an idle server used to answer
  429 for as long as traffic came). Run it with a small queue to see refusals at all, e.g. `--env
  TL_ENGINE__QUEUE_CAPACITY=64 --env TL_ENGINE__QUEUE_DEADLINE_MS=5000`.
* embeddings: N inputs of ~12 tokens in one call (wall time and tokens/s) against the
  prefill tokens/s of one long prompt in the same run; then a streamed chat's largest
  inter-token gap while a `--gap-inputs` embeddings call runs (targets: < 15 s, < 0.5 s).
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.child_server import (DONE, FREE_WITHIN_S, Server, chat_payload, idle_after,  # noqa: E402
                                open_raw_stream, post_json, served_model)
from tests.e2e.helpers import read_until_closed_or  # noqa: E402  (shared)

PROBE_INTERVAL_S = 0.2
PROBE_LIMIT_S = 1.0
STORM_TOKENS = 1000          # long enough that every stream is still running when it is cut
EMBED_CHAT_TOKENS = 1500     # the chat outlasts the embeddings call it is measured beside
EMBED_PREFILL_WORDS = 300    # the long prompt whose prefill tokens/s is the yardstick
MAX_CHAT_GAP_S = 0.5         # targets: a running chat's largest gap, 300 inputs' time
MAX_EMBED_300_S = 15.0


class Prober(threading.Thread):
    """Reads /healthz and /metrics every PROBE_INTERVAL_S; keeps the slowest answer."""

    def __init__(self, server: Server):
        super().__init__(daemon=True)
        self.server, self.stop_event = server, threading.Event()
        self.max_s, self.failures, self.count = 0.0, 0, 0

    def run(self) -> None:
        while not self.stop_event.is_set():
            for path in ("/healthz", "/metrics"):
                started = time.monotonic()
                try:
                    with urllib.request.urlopen(self.server.health + path, timeout=5) as r:
                        r.read()
                except OSError:
                    self.failures += 1
                self.max_s = max(self.max_s, time.monotonic() - started)
                self.count += 1
            self.stop_event.wait(PROBE_INTERVAL_S)


def run_streams(server: Server, n: int, tokens: int) -> dict:
    model, results, lock = served_model(server), [], threading.Lock()

    def one():
        started = time.monotonic()
        try:
            sock = open_raw_stream(server.http, chat_payload(tokens), model)
            body = read_until_closed_or(sock, DONE)
            sock.close()
            ok = DONE in body and b'"error"' not in body and body.startswith(b"HTTP/1.1 200")
            status = body[9:12].decode() if body else "closed"
        except OSError as exc:
            ok, status = False, type(exc).__name__
        with lock:
            results.append((ok, status, time.monotonic() - started))
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses: dict[str, int] = {}
    for _, status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    return {"completed": sum(ok for ok, _, _ in results), "of": n, "statuses": statuses,
            "max_latency_s": round(max(s for _, _, s in results), 2)}


def burst(server: Server, args) -> dict:
    idle = [socket.create_connection(server.http) for _ in range(args.idle)]
    prober = Prober(server)
    prober.start()
    started = time.monotonic()
    result = run_streams(server, args.streams, args.tokens)
    result["wall_s"] = round(time.monotonic() - started, 2)
    prober.stop_event.set()
    prober.join()
    for sock in idle:
        sock.close()
    time.sleep(0.5)
    result.update(idle_connections=args.idle, probe_max_s=round(prober.max_s, 3),
                  probe_failures=prober.failures, probes=prober.count, after=server.idle_state())
    result["ok"] = (result["completed"] == args.streams and prober.max_s < PROBE_LIMIT_S
                    and prober.failures == 0 and not any(result["after"].values()))
    return result


def openai_burst(server: Server, args) -> dict:
    import openai
    client = openai.OpenAI(base_url=f"http://{server.http[0]}:{server.http[1]}/v1",
                           api_key="none", max_retries=args.retries, timeout=600)
    model, outcomes, lock = served_model(server), {}, threading.Lock()

    def one():
        try:
            client.chat.completions.create(model=model, max_tokens=args.tokens, temperature=0,
                                           messages=[{"role": "user", "content": "Hi"}],
                                           extra_body={"ignore_eos": True})
            key = "ok"
        except openai.APIError as exc:
            key = type(exc).__name__
        with lock:
            outcomes[key] = outcomes.get(key, 0) + 1
    started = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(args.chats)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m = server.metrics()
    refused = sum(v for k, v in m.items() if k.startswith("tl_http_requests_total")
                  and 'status="429"' in k)
    return {"chats": args.chats, "outcomes": outcomes, "wall_s": round(time.monotonic() - started, 2),
            "refused_429_then_retried": refused, "ok": outcomes.get("ok", 0) == args.chats}


def storm(server: Server, args) -> dict:
    model = served_model(server)
    socks = []
    for _ in range(args.streams):
        sock = open_raw_stream(server.http, chat_payload(STORM_TOKENS), model)
        socks.append(sock)
    for sock in socks:
        read_until_closed_or(sock, b"data: ")                          # the first chunk
    busy = server.idle_state()
    for sock in socks:                                       # RST: linger on, timeout 0
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    cut = time.monotonic()
    after = server.idle_state()
    while any(after.values()) and time.monotonic() - cut < 10:
        time.sleep(0.02)
        after = server.idle_state()
    freed_s = time.monotonic() - cut
    return {"streams": args.streams, "busy_before": busy, "after": after,
            "freed_s": round(freed_s, 3), "ok": not any(after.values()) and freed_s < FREE_WITHIN_S}


def drain(server: Server, args) -> dict:
    model = served_model(server)
    socks = [open_raw_stream(server.http, chat_payload(args.tokens), model)
             for _ in range(args.streams)]
    firsts = [read_until_closed_or(sock, b"data: ") for sock in socks]
    server.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    refused = False
    deadline = signalled + 5
    while time.monotonic() < deadline and not refused:
        try:
            socket.create_connection(server.http, timeout=1).close()
            time.sleep(0.05)
        except OSError:
            refused = True
    bodies = [read_until_closed_or(sock, DONE, first) for sock, first in zip(socks, firsts)]
    done = sum(DONE in b and b'"error"' not in b for b in bodies)
    code = server.proc.wait(600)
    drain_s = time.monotonic() - signalled
    return {"streams": args.streams, "tokens": args.tokens, "done": done,
            "new_connections_refused": refused, "exit_status": code,
            "drain_s": round(drain_s, 2),
            "ok": done == args.streams and refused and code == 0}


def chat_arrivals(server: Server, model: str, arrivals: list[float], stop: threading.Event):
    """Stream a long chat, noting when each chunk arrives, until `stop` is set."""
    sock = open_raw_stream(server.http, chat_payload(EMBED_CHAT_TOKENS), model)
    while not stop.is_set():
        data = sock.recv(65536)
        if not data:
            break
        arrivals.extend([time.monotonic()] * data.count(b"data: {"))
    sock.close()


def embeddings(server: Server, args) -> dict:
    model = served_model(server)
    post_json(server, "/v1/embeddings", {"model": model, "input": ["warm up"] * 4})
    long_prompt = " ".join(f"word{i}" for i in range(EMBED_PREFILL_WORDS))
    doc, prefill_s = post_json(server, "/v1/completions", {"model": model, "prompt": long_prompt,
                                                           "max_tokens": 1})
    prefill_tok_s = doc["usage"]["prompt_tokens"] / prefill_s
    texts = [f"Document {i}: the quick brown fox jumps over the dog." for i in range(args.inputs)]
    doc, embed_s = post_json(server, "/v1/embeddings", {"model": model, "input": texts})
    embed_tokens = doc["usage"]["prompt_tokens"]
    arrivals, stop = [], threading.Event()
    reader = threading.Thread(target=chat_arrivals, args=(server, model, arrivals, stop))
    reader.start()
    while len(arrivals) < 3 and reader.is_alive():
        time.sleep(0.01)
    alone = len(arrivals)
    started = time.monotonic()
    post_json(server, "/v1/embeddings", {"model": model, "input": texts[:args.gap_inputs]})
    ended = time.monotonic()
    stop.set()
    reader.join(60)
    window = [started] + [t for t in arrivals[alone:] if started < t < ended] + [ended]
    gaps = [b - a for a, b in zip(window, window[1:])]
    result = {"inputs": args.inputs, "tokens_per_input": round(embed_tokens / args.inputs, 1),
              "embed_wall_s": round(embed_s, 2), "embed_tok_s": round(embed_tokens / embed_s),
              "prefill_tok_s": round(prefill_tok_s), "gap_inputs": args.gap_inputs,
              "chat_tokens_during": len(window) - 2, "max_gap_s": round(max(gaps), 3),
              "idle": idle_after(server)}
    result["ok"] = (result["max_gap_s"] < MAX_CHAT_GAP_S and embed_s < MAX_EMBED_300_S
                    and result["idle"]["used_blocks"] == 0)
    return result


LOCKOUT_BURST_S = 2.0        # the burst's clients arrive within this
LOCKOUT_MAX_TRIES = 12       # a retrying client gives up after this many refusals (a server
                             # that locks out would otherwise keep them retrying for ever)


def lockout(server: Server, args) -> dict:
    model = served_model(server)
    url = f"http://{server.http[0]}:{server.http[1]}/v1/chat/completions"
    body = json.dumps({"model": model, "max_tokens": args.tokens, "temperature": 0,
                       "messages": [{"role": "user", "content": "Say hello."}]}).encode()
    first_status, served_at, lock = {}, {}, threading.Lock()
    refusals = {"burst": 0, "new": 0}               # 429s and 503s seen, by kind of client

    def whole_chat() -> tuple[int, int]:
        """A plain chat to its end: (status, Retry-After)."""
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as r:
                r.read()
                return r.status, 0
        except urllib.error.HTTPError as err:
            return err.code, int(err.headers.get("Retry-After") or 1)

    def impatient_stream() -> tuple[int, int]:
        """A streamed chat cut after its first token (a load test, an impatient proxy)."""
        sock = open_raw_stream(server.http, chat_payload(args.tokens), model)
        head = read_until_closed_or(sock, b"data: ")
        sock.close()
        status = int(head[9:12]) if head[:5] == b"HTTP/" else 0
        retry = re.search(rb"(?i)retry-after: (\d+)", head)
        return status, int(retry.group(1)) if retry else 1

    def client(name, at_s: float, retries: bool, started: float) -> None:
        time.sleep(max(0.0, started + at_s - time.monotonic()))   # its arrival time
        for _ in range(LOCKOUT_MAX_TRIES):
            sent_s = time.monotonic() - started
            status, retry_s = impatient_stream() if name[0] == "burst" else whole_chat()
            with lock:
                first_status.setdefault(name, (status, sent_s))
                if status == 200:
                    served_at[name] = time.monotonic() - started
                elif status in (429, 503):
                    refusals[name[0]] += 1
            if status == 200 or not retries or status not in (429, 503):
                return
            time.sleep(retry_s)
    started = time.monotonic()
    plan = [(("burst", c), c * LOCKOUT_BURST_S / args.clients, c % 2 == 0)
            for c in range(args.clients)]
    plan += [(("new", s), float(s), True) for s in range(1, int(args.trickle_s) + 1)]
    threads = [threading.Thread(target=client, args=(*p, started)) for p in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    burst_served = [t for (kind, _), t in served_at.items() if kind == "burst"]
    drained_s = max(burst_served, default=0.0)
    late = {n: st for n, st in first_status.items() if n[0] == "new" and st[1] > drained_s}
    refused_late = sum(status != 200 for status, _ in late.values())
    retriers = [n for n, _, retries in plan if n[0] == "burst" and retries]
    return {"clients": args.clients, "burst_refused_at_first": sum(
                first_status[n][0] != 200 for n, _, _ in plan if n[0] == "burst"),
            "burst_drained_s": round(drained_s, 1), "new_after_drain": len(late),
            "new_refused_after_drain": refused_late,
            "retrying_served": sum(n in served_at for n in retriers), "retrying": len(retriers),
            "new_served": sum(n[0] == "new" for n in served_at),
            "new_refused_at_first": sum(st[0] != 200 for n, st in first_status.items()
                                        if n[0] == "new"),
            "refusals": refusals,
            "ok": refused_late == 0 and all(n in served_at for n in retriers)}


SCENARIOS = {"burst": burst, "openai": openai_burst, "storm": storm, "drain": drain,
             "embeddings": embeddings, "lockout": lockout}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--model-dir")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="TL_ENGINE__ overrides, e.g. TL_ENGINE__MAX_NUM_SEQS=16")
    p.add_argument("--streams", type=int)
    p.add_argument("--idle", type=int, default=1000)
    p.add_argument("--tokens", type=int)
    p.add_argument("--chats", type=int, default=512)
    p.add_argument("--retries", type=int, default=5)
    p.add_argument("--inputs", type=int, default=300)
    p.add_argument("--gap-inputs", type=int, default=256)
    p.add_argument("--clients", type=int, default=300)
    p.add_argument("--trickle-s", type=float, default=120.0)
    p.add_argument("--repo", type=Path, default=REPO, help="the checkout whose server runs")
    args = p.parse_args()
    args.streams = args.streams or {"burst": 256, "storm": 64, "drain": 48}.get(args.scenario, 0)
    args.tokens = args.tokens or {"drain": 64, "lockout": 1024}.get(args.scenario, 32)
    env = dict(kv.split("=", 1) for kv in args.env)
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = Server(args.model_dir, env, args.repo.resolve())
    try:
        result = SCENARIOS[args.scenario](server, args)
    finally:
        code = server.stop()
    result.update(scenario=args.scenario, env=env, server_exit_code=code)
    errors = [line for line in server.log if "Traceback" in line]
    result["tracebacks_in_log"] = len(errors)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
