"""The server under test for bench/load_sweep.py, always in a process of its own, and its load.

Either our own server, spawned as `tlserve.py --config runtime.toml` (bench/pressure.py's
Server: free ports, the access log off, settings as `TL_ENGINE__` environment overrides, so
any new engine key works without a change here) and stopped with SIGTERM; or any
OpenAI-compatible server at a URL (llama-server, vLLM), which only gets requests.

The load is streaming chat: prompts of ~40-100 tokens that differ from the first words on
(a seeded choice of task and words per request index), so the prefix cache only shares the
chat template's own head, `temperature` 0, `ignore_eos` (every answer has the same length).
"""
from __future__ import annotations

import json
import random
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from bench.load_client import Target
from bench.child_server import Server, idle_after
from server.config import ENV_PREFIX
from tests.e2e.helpers import parse_metrics

READY_TIMEOUT_S = 300.0
HTTP_TIMEOUT_S = 30.0
SETTLE_S = 1.0                  # after a cell against a foreign server: let it drop the cut streams
IDLE_WITHIN_S = 30.0            # our server: the cut streams are aborted within this
# Our server's counters (Endpoint.metrics) that the cases and the sweep's bound read.
STEPS_COUNTER = "tl_engine_steps_total"
PROMPT_COUNTER = "tl_engine_prefix_cache_prompt_tokens_total"
HIT_COUNTER = "tl_engine_prefix_cache_hit_tokens_total"
TASKS = ("Summarise these notes", "Explain the ideas in this list", "Write a short story using",
         "Describe a day that involves", "Give advice about", "Compare and contrast")
WORDS = ("lighthouse keeper harbour storm lantern bottle message island sailor rope map "
         "compass winter garden river mountain village market bakery teacher student library "
         "engine bicycle train station ticket journey letter window candle forest fox owl "
         "clock tower bridge castle painter violin recipe kitchen festival ocean wave cloud "
         "thunder harvest orchard apple meadow shepherd wool weaver loom mirror ladder").split()
WORDS_PER_PROMPT = (16, 56)     # with the chat template: ~40-100 prompt tokens on smol-135m


def settings_env(pairs: Iterable[str]) -> dict[str, str]:
    """["max_num_seqs=64", "speculative.method=prompt_lookup"] -> {"TL_ENGINE__MAX_NUM_SEQS":
    "64", "TL_ENGINE__SPECULATIVE__METHOD": "prompt_lookup"} (server/config.py reads these)."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {pair!r}")
        env[ENV_PREFIX + key.strip().upper().replace(".", "__")] = value.strip()
    return env


def config_sets(text: str) -> list[str]:
    """'max_num_seqs=64,max_batched_tokens=2048' -> its pairs ('' -> none)."""
    return [part for part in (p.strip() for p in text.split(",")) if part]


def chat_prompt(i: int) -> str:
    rng = random.Random(i)
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(*WORDS_PER_PROMPT)))
    return f"Request {i}. {rng.choice(TASKS)}: {words}."


def chat_body(model: str, user: str, max_tokens: int, *, system: str = "",
              ignore_eos: bool = True) -> bytes:
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}]
    doc = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
           "stream": True, "stream_options": {"include_usage": True}}
    if ignore_eos:
        doc["ignore_eos"] = True
    return json.dumps(doc).encode()


@dataclass
class Endpoint:
    """A server to load: where to send, which model, and (ours only) its health URL."""
    target: Target
    model: str
    health_url: str = ""            # "": a foreign server (no /metrics of ours)
    label: str = ""

    def metrics(self) -> dict[str, float]:
        if not self.health_url:
            return {}
        with urllib.request.urlopen(self.health_url + "/metrics", timeout=HTTP_TIMEOUT_S) as r:
            return parse_metrics(r.read().decode())

    def settle(self, server: Server | None) -> None:
        """Between cells: wait until the streams the client cut are gone."""
        if server is not None:
            idle_after(server, IDLE_WITHIN_S)
        else:
            time.sleep(SETTLE_S)


def _get_json(url: str, headers: dict[str, str]) -> dict:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                timeout=HTTP_TIMEOUT_S) as r:
        return json.load(r)


def _wait_ready(health_url: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(health_url + "/readyz", timeout=HTTP_TIMEOUT_S) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server not ready at {health_url}/readyz after {READY_TIMEOUT_S:.0f} s")


@contextmanager
def spawned(model_dir: str | None, env: dict[str, str], label: str,
            repo: Path | None = None) -> Iterator[tuple[Endpoint, Server]]:
    """Our server (from `repo`, default this checkout) in a child process with `env`
    overrides; SIGTERM at the end."""
    server = Server(model_dir, {**env, ENV_PREFIX + "ACCESS_LOG": "off"}, *([repo] if repo else []))
    try:
        _wait_ready(server.health)
        host, port = server.http
        model = _get_json(f"http://{host}:{port}/v1/models", {})["data"][0]["id"]
        yield Endpoint(Target(host, port), model, server.health, label), server
    finally:
        code = server.stop()
        if code:
            print(f"# server ({label}) exited with {code}:\n" + "".join(server.log[-20:]))


def at_url(url: str, model: str, api_key: str) -> Endpoint:
    """A foreign OpenAI-compatible server; the model defaults to the first it lists."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise SystemExit(f"--url: expected http://host:port[/v1], got {url!r} (no TLS here)")
    base = parts.path.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if not model:
        model = _get_json(f"http://{parts.netloc}{base}/models", auth)["data"][0]["id"]
    headers = b"".join(f"{k}: {v}\r\n".encode() for k, v in auth.items())
    target = Target(parts.hostname, parts.port or 80, base + "/chat/completions", headers)
    return Endpoint(target, model, "", url)
