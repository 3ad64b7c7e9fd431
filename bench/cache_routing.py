"""Cache-aware routing against least connections: 3 tl-serve replicas behind HAProxy, the
same multi-turn chat load through deploy/haproxy/haproxy.cfg and cache-aware.cfg.

    python bench/cache_routing.py                      # the measurement (smol-135m, ~1 h on 2 cores)
    python bench/cache_routing.py --turns 2 --conversations 8 --max-tokens 16   # a smoke run
    python bench/cache_routing.py --quick              # the succ test model: the harness only

The load: `--conversations` (24) conversations of `--turns` (6) turns in `--groups` (4)
groups; every conversation of a group opens with the group's system prompt of
`--system-tokens` (600) tokens; each turn adds a user message of 60-100 tokens and the
answer (`--max-tokens` 64, ignore_eos, temperature 0, so both configs see the very same
conversations); `--in-flight` (8) conversations run at a time, each request carrying
`prompt_cache_key` = its conversation's id. Each replica runs with kv_cache_mib 256.

Each run starts three fresh replicas (empty prefix caches) and HAProxy with one config;
the configs alternate, `--rounds` times (leastconn first in odd rounds, cache-aware first in
even ones). Per config it reports, from the replicas' own counters summed over the three:

    prefix-cache hit ratio   vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total
    prompt tokens computed   the sum of (queries - hits): the prompt tokens prefilled
and from the client: TTFT p50/p99 (sending to the first content chunk), requests, failures,
wall time; then cache-aware / leastconn for tokens computed and TTFT p50. One JSON line at
the end. Timings on a shared machine are indicative only.

Never run by the tests.
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.child_server import Server, free_port  # noqa: E402  (shared)
from bench.rolling_restart import find_haproxy, get_status  # noqa: E402

CONFIGS = {"leastconn": ROOT / "deploy" / "haproxy" / "haproxy.cfg",
           "cache-aware": ROOT / "deploy" / "haproxy" / "cache-aware.cfg"}
OUT = ROOT / "bench" / "out"
REPLICAS = 3                        # the configs name three servers
KV_CACHE_MIB = 256
USER_TOKENS = (60, 100)             # each user message, uniformly in this range
CLIENT_TIMEOUT_S = 900.0            # a turn queued behind the others on a loaded machine
LB_READY_S = 30.0
WORDS = ("river stone lantern orbit velvet maple signal harbor copper meadow puzzle "
         "quartz ember violet canyon pepper falcon ribbon glacier tundra saddle cobalt "
         "thistle marble beacon walnut").split()


@dataclass
class Turn:
    conversation: str
    ttft_s: float | None = None     # None: no content came (a failure)
    error: str | None = None


@dataclass
class Run:
    config: str
    turns: list[Turn] = field(default_factory=list)
    wall_s: float = 0.0
    queries_tokens: float = 0.0
    hits_tokens: float = 0.0

    def report(self) -> dict:
        ttfts = sorted(t.ttft_s for t in self.turns if t.ttft_s is not None)
        failed = [t.error for t in self.turns if t.error is not None]
        return {"config": self.config, "requests": len(self.turns), "failed": len(failed),
                "first_failure": failed[0] if failed else None,
                "wall_s": round(self.wall_s, 1),
                "prefix_hit_ratio": round(self.hits_tokens / self.queries_tokens, 4)
                if self.queries_tokens else None,
                "prompt_tokens": int(self.queries_tokens),
                "prompt_tokens_computed": int(self.queries_tokens - self.hits_tokens),
                "ttft_p50_s": round(quantile(ttfts, 0.50), 3) if ttfts else None,
                "ttft_p99_s": round(quantile(ttfts, 0.99), 3) if ttfts else None}


def quantile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank quantile of sorted values: the smallest with at least q of them
    at or below it."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


# ---- the load: the same text for both configs --------------------------------------------

class Texts:
    """Word text cut to a token count, counted by a replica's /v1/tokenize."""

    def __init__(self, server: Server, model: str):
        self.server, self.model = server, model

    def tokens(self, text: str) -> int:
        host, port = self.server.http
        conn = http.client.HTTPConnection(host, port, timeout=60)
        conn.request("POST", "/v1/tokenize", json.dumps({"model": self.model, "prompt": text}),
                     {"Content-Type": "application/json"})
        count = json.loads(conn.getresponse().read())["count"]
        conn.close()
        return count

    def of_tokens(self, rng: random.Random, head: str, target_tokens: int) -> str:
        """`head` and then random words, as many as keep it within `target_tokens`."""
        words = [rng.choice(WORDS) for _ in range(target_tokens * 2)]
        low, high = 0, len(words)                  # binary search on the number of words
        while low < high:
            mid = (low + high + 1) // 2
            if self.tokens(head + " ".join(words[:mid])) <= target_tokens:
                low = mid
            else:
                high = mid - 1
        return head + " ".join(words[:low])


@dataclass(frozen=True)
class Conversation:
    id: str
    system: str
    users: tuple[str, ...]


def build_load(texts: Texts, args) -> list[Conversation]:
    rng = random.Random(20261202)
    systems = [texts.of_tokens(rng, f"You are assistant number {g} of the help desk. ",
                               args.system_tokens) for g in range(args.groups)]
    conversations = []
    for c in range(args.conversations):
        users = tuple(texts.of_tokens(rng, f"Question {t} of chat {c}: ",
                                      rng.randint(*USER_TOKENS)) for t in range(args.turns))
        conversations.append(Conversation(f"conv-{c:03d}", systems[c % args.groups], users))
    return conversations


# ---- one run: replicas, HAProxy, the clients ---------------------------------------------

def ask(port: int, model: str, conversation: Conversation, messages: list[dict],
        max_tokens: int) -> tuple[Turn, str]:
    """One streamed turn through the balancer: its TTFT and the answer's text."""
    turn = Turn(conversation.id)
    body = json.dumps({"model": model, "messages": messages, "stream": True,
                       "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0,
                       "prompt_cache_key": conversation.id})
    sent_s, parts = time.monotonic(), []
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            turn.error = f"status {response.status}: {response.read()[:200]!r}"
            return turn, ""
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                text = choice.get("delta", {}).get("content")
                if text:
                    turn.ttft_s = turn.ttft_s or time.monotonic() - sent_s
                    parts.append(text)
        conn.close()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        turn.error = f"{type(exc).__name__}: {exc}"
    if turn.ttft_s is None and turn.error is None:
        turn.error = "no content"
    return turn, "".join(parts)


def converse(port: int, model: str, todo: Queue, run: Run, max_tokens: int) -> None:
    """Take conversations off the queue and play each one's turns in order."""
    while True:
        try:
            conversation = todo.get_nowait()
        except Empty:
            return
        messages = [{"role": "system", "content": conversation.system}]
        for user in conversation.users:
            messages.append({"role": "user", "content": user})
            turn, answer = ask(port, model, conversation, messages, max_tokens)
            run.turns.append(turn)                             # list.append: thread-safe
            messages.append({"role": "assistant", "content": answer})


def start_replicas(model_dir: str) -> list[Server]:
    env = {"TL_ENGINE__KV_CACHE_MIB": str(KV_CACHE_MIB), "TL_ENGINE__ACCESS_LOG": "off"}
    return [Server(model_dir, env) for _ in range(REPLICAS)]


def counter_sum(server: Server, name: str) -> float:
    """A counter summed over the replica's models (from its health port)."""
    return sum(v for k, v in server.metrics().items() if k.partition("{")[0] == name)


def one_run(config: str, model_dir: str, model: str, load: list[Conversation], args) -> Run:
    replicas = start_replicas(model_dir)
    lb_port = free_port()
    env = {**os.environ, "TL_LB_BIND": f"127.0.0.1:{lb_port}"}
    for i, r in enumerate(replicas, 1):
        env[f"TL_R{i}_API"] = f"{r.http[0]}:{r.http[1]}"
        env[f"TL_R{i}_HEALTH_PORT"] = r.health.rsplit(":", 1)[1]
    log = open(OUT / f"cache_routing_{config}_haproxy.log", "ab")
    lb = subprocess.Popen([find_haproxy(), "-db", "-f", str(CONFIGS[config])], env=env,
                          stdout=log, stderr=subprocess.STDOUT)
    run = Run(config)
    try:
        deadline = time.monotonic() + LB_READY_S
        while get_status(lb_port, "/healthz") != 200:
            if time.monotonic() > deadline or lb.poll() is not None:
                sys.exit(f"haproxy did not come up; see {log.name}")
            time.sleep(0.1)
        todo: Queue = Queue()
        for conversation in load:
            todo.put(conversation)
        clients = [threading.Thread(target=converse, args=(lb_port, model, todo, run,
                                                           args.max_tokens))
                   for _ in range(args.in_flight)]
        started_s = time.monotonic()
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        run.wall_s = time.monotonic() - started_s
        run.queries_tokens = sum(counter_sum(r, "vllm:prefix_cache_queries_total")
                                 for r in replicas)
        run.hits_tokens = sum(counter_sum(r, "vllm:prefix_cache_hits_total") for r in replicas)
    finally:
        lb.terminate()
        lb.wait(30)
        for r in replicas:
            r.stop()
    return run


def quick_model() -> str:
    from tests.models import write_succ_model
    return str(write_succ_model(Path(tempfile.mkdtemp(prefix="cache-routing-")) / "succ"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conversations", type=int, default=24)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--in-flight", type=int, default=8)
    p.add_argument("--system-tokens", type=int, default=600)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=1, help="each config once per round")
    p.add_argument("--model-dir", default=str(ROOT / "artifacts" / "models" / "smol-135m"))
    p.add_argument("--quick", action="store_true", help="the succ test model (harness check)")
    args = p.parse_args()
    # SIGTERM (a timeout) unwinds like an exception, so the replicas and HAProxy are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.model_dir = quick_model()
        args.turns = min(args.turns, 2)      # the succ model's 1,024-token context holds two
    OUT.mkdir(parents=True, exist_ok=True)
    calibrate = Server(args.model_dir, {"TL_ENGINE__ACCESS_LOG": "off"})
    try:
        from bench.child_server import served_model
        model = served_model(calibrate)
        load = build_load(Texts(calibrate, model), args)
    finally:
        calibrate.stop()
    print(f"{len(load)} conversations x {args.turns} turns, {args.groups} groups, "
          f"{args.in_flight} in flight, model {model}", flush=True)
    runs: dict[str, list[Run]] = {name: [] for name in CONFIGS}
    for round_index in range(args.rounds):
        order = list(CONFIGS) if round_index % 2 == 0 else list(reversed(CONFIGS))
        for config in order:
            run = one_run(config, args.model_dir, model, load, args)
            runs[config].append(run)
            print(json.dumps(run.report()), flush=True)
    summary = {name: [r.report() for r in rs] for name, rs in runs.items()}
    first = {name: rs[0].report() for name, rs in runs.items()}
    lc, ca = first["leastconn"], first["cache-aware"]
    if lc["prompt_tokens_computed"] and lc["ttft_p50_s"] and ca["ttft_p50_s"] is not None:
        summary["computed_ratio"] = round(ca["prompt_tokens_computed"]
                                          / lc["prompt_tokens_computed"], 3)
        summary["ttft_p50_ratio"] = round(ca["ttft_p50_s"] / lc["ttft_p50_s"], 3)
    summary["load"] = {"conversations": args.conversations, "turns": args.turns,
                       "groups": args.groups, "in_flight": args.in_flight,
                       "system_tokens": args.system_tokens, "max_tokens": args.max_tokens,
                       "kv_cache_mib": KV_CACHE_MIB, "model": model}
    print(json.dumps(summary))
    return 1 if any(r["failed"] for rs in summary.values() if isinstance(rs, list)
                    for r in rs) else 0


if __name__ == "__main__":
    sys.exit(main())
