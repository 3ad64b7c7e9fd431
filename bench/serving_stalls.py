"""Serving stalls on the wall clock, beside the limits the project holds them to, on the
tests' tiny models (tests/models.py, written to a temporary folder):

* a taken health port: `bind` refuses within 1 s (no retries, no model load);
* a 256-input embeddings call beside a streaming chat (the tiny Llama in this process,
  5 ms steps of at most 64 tokens): the chat gets at least 10 tokens during the call, and its
  largest gap is under half the call (a serial embed freezes it for nearly the whole call);
* the Zod integer schema compiling beside a streaming chat (succ with runtime.toml in a child
  process, 10 ms steps): /healthz, /readyz and /metrics each answer within 100 ms, the
  stream's largest gap touching the compile is under 0.5 s with tokens inside it, and the
  loop's worst stall (`tl_loop_stall_seconds_max`) stays under 100 ms.

The end-to-end tests check the same mechanisms by counting (a bind, the loader never called,
a token in every step an embedding runs in, a compile held on an event while probes and the
stream are served); these are the seconds behind them. bench/loop_stall.py measures the
loop under every heavy request at the real model's scale. Run by bench/timing_checks.py.
"""
from __future__ import annotations

import gc
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import numpy as np
import requests

from bench.limit_check import LimitCheck
from engine.api import EngineConfig
from server.config import ServeConfig
from server.serve import StartupError, bind
from tests.e2e.helpers import (TIMEOUT_S, chat_body, child_server, metrics, post, running_server,
                               taken_port)
from tests.models import write_succ_model, write_tiny_llama

MAX_BIND_REFUSAL_S = 1.0
EMBED_INPUTS = 256
EMBED_STEP_DELAY_S = 0.005
EMBED_BUDGET_TOKENS = 64             # max_batched_tokens: 256 inputs take dozens of steps
MIN_TOKENS_DURING_EMBED = 10
EMBED_CHAT_TOKENS = 400              # the chat outlasts the call (the tiny Llama's context: 512)
COMPILE_STEP_DELAY_S = 0.01
MAX_PROBE_S = 0.1                    # /healthz, /readyz, /metrics while the grammar compiles
MAX_STREAM_GAP_S = 0.5               # a running stream's largest gap meanwhile (steps ~10 ms)
COMPILE_CHAT_TOKENS = 1000           # 10 s of steps: the stream outlasts the compile
PROBE_PATHS = ("/healthz", "/readyz", "/metrics")
QUIET_ACCESS_LOG = {"TL_ENGINE__ACCESS_LOG": "off"}   # runtime.toml's goes to stdout: the JSON lines'
ZOD_INT = {"type": "object", "properties": {"n": {"type": "integer",
                                                  "minimum": -9007199254740991,
                                                  "maximum": 9007199254740991}},
           "required": ["n"]}


def taken_port_check(succ_dir: Path) -> LimitCheck:
    with taken_port() as port:
        cfg = replace(ServeConfig.for_model(succ_dir), health_listen=f"127.0.0.1:{port}")
        start_s = time.perf_counter()
        try:
            bind(cfg)
        except StartupError:
            took_s = time.perf_counter() - start_s
        else:
            raise SystemExit(f"bind() served a taken port ({port})")
    return LimitCheck("taken port refused", took_s, MAX_BIND_REFUSAL_S, "s")


class StreamClock:
    """Reads a streamed chat on a thread, noting when each SSE data line arrived."""

    def __init__(self, server, model: str, max_tokens: int):
        self.arrivals_s: list[float] = []
        self.started = threading.Event()
        self._stop = threading.Event()
        body = chat_body("go", model=model, max_tokens=max_tokens, temperature=0, stream=True,
                         ignore_eos=True)
        self.thread = threading.Thread(target=self._read, args=(server, body), daemon=True)
        self.thread.start()

    def _read(self, server, body):
        with requests.post(server.http_url + "/v1/chat/completions", json=body, stream=True,
                           timeout=TIMEOUT_S) as r:
            for line in r.iter_lines():
                if line.startswith(b"data: {"):
                    self.arrivals_s.append(time.monotonic())
                    if len(self.arrivals_s) == 3:
                        self.started.set()        # decoding, not just admitted
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(TIMEOUT_S)

    def largest_gap_s(self, start_s: float, end_s: float) -> tuple[float, int]:
        """The largest gap between arrivals that touches [start_s, end_s], and how many
        arrived inside it."""
        times = list(self.arrivals_s)
        inside = [t for t in times if start_s <= t <= end_s]
        before = [t for t in times if t < start_s][-1:]
        after = [t for t in times if t > end_s][:1]
        edges = before + inside + after
        gaps = [b - a for a, b in zip(edges, edges[1:])]
        return max(gaps, default=end_s - start_s), len(inside)


def embeddings_checks(tiny_dir: Path) -> Iterator[LimitCheck]:
    model = tiny_dir.name
    with running_server(tiny_dir, step_delay_s=EMBED_STEP_DELAY_S,
                        engine=EngineConfig(max_batched_tokens=EMBED_BUDGET_TOKENS,
                                            prefill_chunk=32)) as server:
        stream = StreamClock(server, model, EMBED_CHAT_TOKENS)
        if not stream.started.wait(TIMEOUT_S):
            raise SystemExit("the chat did not start decoding")
        texts = [f"document number {i} about a topic" for i in range(EMBED_INPUTS)]
        started_s = time.monotonic()
        r = post(server, "/v1/embeddings", {"model": model, "input": texts})
        ended_s = time.monotonic()
        stream.stop()
    if r.status_code != 200 or len(r.json()["data"]) != EMBED_INPUTS:
        raise SystemExit(f"the embeddings call failed: {r.status_code} {r.text[:200]}")
    during = [t for t in stream.arrivals_s if started_s < t < ended_s]
    call_s = ended_s - started_s
    yield LimitCheck("chat tokens during 256 embeddings", len(during), MIN_TOKENS_DURING_EMBED,
                     "tokens", at_least=True, note=f"call {call_s:.3f} s")
    gaps_s = np.diff([started_s] + during)
    yield LimitCheck("chat's largest gap during 256 embeddings", float(gaps_s.max()), call_s / 2,
                     "s", note="limit: half the call")


def compile_checks(succ_dir: Path) -> Iterator[LimitCheck]:
    body = chat_body("a", max_tokens=4, response_format={
        "type": "json_schema", "json_schema": {"name": "zod", "schema": ZOD_INT}})
    with child_server(succ_dir, "--config", "runtime.toml", step_delay_s=COMPILE_STEP_DELAY_S,
                      env=QUIET_ACCESS_LOG) as server:
        stream = StreamClock(server, "succ", COMPILE_CHAT_TOKENS)
        if not stream.started.wait(TIMEOUT_S):
            raise SystemExit("the stream did not start")
        answer: dict = {}
        heavy = threading.Thread(target=lambda: answer.update(r=post(
            server, "/v1/chat/completions", body)))
        probes_s = {path: 0.0 for path in PROBE_PATHS}
        start_s = time.monotonic()
        gc.disable()                    # this process's own collections are not the server's
        try:
            heavy.start()
            while heavy.is_alive():
                for path in PROBE_PATHS:
                    sent_s = time.monotonic()
                    requests.get(server.health_url + path, timeout=TIMEOUT_S).raise_for_status()
                    probes_s[path] = max(probes_s[path], time.monotonic() - sent_s)
        finally:
            gc.enable()
        end_s = time.monotonic()
        heavy.join()
        gap_s, inside = stream.largest_gap_s(start_s, end_s)
        stall_s = metrics(server)["tl_loop_stall_seconds_max"]
        stream.stop()
    status = answer["r"].status_code
    if status not in (200, 400):             # compiled, or refused as too large
        raise SystemExit(f"the Zod schema's request failed: {status}")
    note = f"compile {end_s - start_s:.3f} s, status {status}"
    for path, slowest_s in probes_s.items():
        yield LimitCheck(f"slowest {path} during a compile", slowest_s, MAX_PROBE_S, "s", note=note)
    yield LimitCheck("stream's largest gap during a compile", gap_s, MAX_STREAM_GAP_S, "s",
                     note=f"{inside} tokens inside")
    yield LimitCheck("stream tokens during a compile", inside, 1, "tokens", at_least=True)
    yield LimitCheck("loop's worst stall", stall_s, MAX_PROBE_S, "s")


def checks(models_dir: Path) -> Iterator[LimitCheck]:
    """Every serving check on models written under `models_dir`, each yielded when measured."""
    succ_dir = write_succ_model(models_dir / "succ")
    tiny_dir = write_tiny_llama(models_dir / "tiny-llama")
    yield taken_port_check(succ_dir)
    yield from embeddings_checks(tiny_dir)
    yield from compile_checks(succ_dir)
