"""Helpers for the end-to-end tests: start a real server on port 0, talk SSE and raw HTTP."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
import requests

from server.config import ServeConfig
from server.serve import spawn
from tests.fakes import StepDelay

TIMEOUT_S = 30
REAL_KV_CACHE_MIB = 32          # smol-135m servers: a small KV pool is plenty
REAL_CLIENT_TIMEOUT_S = 120    # ... and its client waits for a CPU-bound real model


def openai_client(handle, timeout_s: float = TIMEOUT_S) -> openai.OpenAI:
    """The official client pointed at a running server: no retries (a test sees the first
    answer), no key (the test servers have none)."""
    return openai.OpenAI(base_url=handle.http_url + "/v1", api_key="unused", max_retries=0,
                         timeout=timeout_s)


def slowed(wrap_engine, step_delay_s: float):
    """`wrap_engine` (or none) with every step followed by `step_delay_s` (0: as it is)."""
    if not step_delay_s:
        return wrap_engine
    return lambda engine: StepDelay(wrap_engine(engine) if wrap_engine else engine, step_delay_s)


@contextmanager
def running_server(model_dir, wrap_engine=None, step_delay_s: float = 0.0, **overrides):
    """A server for one model on 127.0.0.1 port 0; drained and joined on exit.
    `wrap_engine` (Engine -> engine-like) injects faults into the engine the bridge drives;
    `step_delay_s` slows each step (tests/fakes.py's StepDelay, through the same seam)."""
    handle = spawn(ServeConfig.for_model(model_dir, **overrides),
                   slowed(wrap_engine, step_delay_s))
    try:
        yield handle
    finally:
        handle.stop()


def two_chat_config(first_dir, second_dir, first: str = "", second: str = "") -> ServeConfig:
    """A server of two chat models on loopback port 0: `first_dir` as "succ" ([engine],
    plus the lines `first`), `second_dir` as "tiny" ([[models]], plus the lines `second`)."""
    return ServeConfig.from_toml(f"""
[engine]
model_dir = "{first_dir}"
model_id = "succ"
http_listen = "127.0.0.1:0"
health_listen = "127.0.0.1:0"
access_log = "off"
{first}
[[models]]
id = "tiny"
model_dir = "{second_dir}"
{second}
""", env={})


READY_LINE = re.compile(r"ready: API on (\S+), health on (\S+)")    # the model has loaded
REPO = Path(__file__).resolve().parents[2]


@dataclass
class ChildServer:
    """A server in a child process, with the addresses the other helpers read (as
    server/serve.py's ServerHandle has them)."""
    proc: subprocess.Popen
    http_addr: str                  # "host:port"
    health_addr: str
    log: list[str]                  # its stderr, read on by a thread

    def __post_init__(self):
        self.http_url, self.health_url = f"http://{self.http_addr}", f"http://{self.health_addr}"


@contextmanager
def child_server(model_dir, *flags: str, step_delay_s: float = 0.0, env=None):
    """tlserve (tests/e2e/child_tlserve.py) for one model in a child process on port 0, as
    production runs it (its own GIL); `flags` are tlserve's, `env` adds TL_* settings.
    SIGTERM (a drain) on exit unless the test ended it; killed if it does not exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.child_tlserve", str(step_delay_s), "--model-dir",
         str(model_dir), "--port", "0", "--health-port", "0", *flags],
        cwd=REPO, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    try:
        yield _ready(proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ready(proc: subprocess.Popen) -> ChildServer:
    """Read the child's stderr to its ready line; the rest is kept by a reader thread."""
    log: list[str] = []
    for line in proc.stderr:
        log.append(line)
        match = READY_LINE.search(line)
        if match:
            threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
            http_addr, health_addr = (a.replace("0.0.0.0", "127.0.0.1") for a in match.groups())
            return ChildServer(proc, http_addr, health_addr, log)
    raise AssertionError("the server did not start: " + "".join(log))


def server_fixture(model_fixture: str, **options):
    """The e2e modules' one fixture factory: a module-scoped fixture that runs
    `running_server(<the model fixture's directory>, **options)` for the module's tests.

        server = server_fixture("succ_model_dir", queue_capacity=1)
        client = client_fixture(timeout_s=60)      # the official client on that server
    """
    @pytest.fixture(scope="module")
    def server(request):
        with running_server(request.getfixturevalue(model_fixture), **options) as handle:
            yield handle
    return server


def client_fixture(timeout_s: float = TIMEOUT_S):
    """A module-scoped fixture: `openai_client` on the module's `server` fixture."""
    @pytest.fixture(scope="module")
    def client(server):
        return openai_client(server, timeout_s=timeout_s)
    return client


def post(handle, path: str, body: dict, **kwargs) -> requests.Response:
    return requests.post(handle.http_url + path, json=body, timeout=TIMEOUT_S, **kwargs)


def chat_body(content: str, **fields) -> dict:
    return {"model": fields.pop("model", "succ"),
            "messages": [{"role": "user", "content": content}], **fields}


def sse_events(raw: bytes) -> list[str]:
    """Split an SSE body into event payloads; every event must end with a blank line."""
    text = raw.decode("utf-8")
    assert text.endswith("\n\n"), "an SSE body ends with a blank line"
    events = []
    for block in text.split("\n\n")[:-1]:
        lines = block.split("\n")
        data = [line[len("data: "):] for line in lines if line.startswith("data: ")]
        if data:
            events.append("\n".join(data))
    return events


def stream_chunks(response: requests.Response) -> tuple[list[dict], bool]:
    """(JSON chunks, saw [DONE]) of a complete streamed response."""
    events = sse_events(response.content)
    done = events[-1] == "[DONE]"
    return [json.loads(e) for e in events if e != "[DONE]"], done


def chat_stream_text(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


MODEL_LABEL = re.compile(r'model="[^"]*",?')


def parse_metrics(text: str, keep_model: bool = False) -> dict[str, float]:
    """Prometheus text -> the samples as {"name{labels}": value}. A one-model server's
    `model` label is dropped unless `keep_model` (so "tl_engine_queue_depth" names it)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            if not keep_model:
                name = MODEL_LABEL.sub("", name).replace("{}", "")
            out[name] = float(value)
    return out


def metrics(handle) -> dict[str, float]:
    """The /metrics samples of a running server as {"name{labels}": value}."""
    return parse_metrics(requests.get(handle.health_url + "/metrics", timeout=TIMEOUT_S).text)


def send_stream(handle, body: dict, path: str = "/v1/chat/completions") -> socket.socket:
    """Send a chat request (or one to `path`) on a raw socket and return at once (nothing
    read yet)."""
    host, port = handle.http_addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
    payload = json.dumps(body).encode()
    sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: " + str(len(payload)).encode() +
                 b"\r\n\r\n" + payload)
    return sock


def open_stream(handle, body: dict,
                path: str = "/v1/chat/completions") -> tuple[socket.socket, bytes]:
    """Send a streaming request on a raw socket; return it after the head has arrived."""
    sock = send_stream(handle, body, path)
    received = b""
    while b"\r\n\r\n" not in received or b"data: " not in received:
        data = sock.recv(65536)
        assert data, "server closed the stream early"
        received += data
    return sock, received


def read_until_closed_or(sock: socket.socket, marker: bytes, received: bytes = b"") -> bytes:
    while marker not in received:
        data = sock.recv(65536)
        if not data:
            break
        received += data
    return received


@contextmanager
def taken_port():
    """A port another socket listens on, for as long as the block runs: -> its number."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        yield taken.getsockname()[1]
    finally:
        taken.close()


def read_startup(proc: subprocess.Popen, timeout_s: float) -> str:
    """A server process's stderr up to its "ready" line (or its one-line refusal); a watchdog
    kills a process that goes silent, so a hang cannot block the suite."""
    watchdog = threading.Timer(timeout_s, proc.kill)
    watchdog.start()
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if " ready: " in line or line.startswith("tlserve: "):
                break
    finally:
        watchdog.cancel()
    return "".join(lines)


NODE_DIR = Path(__file__).parent / "node"
NODE_PACKAGES = ("openai", "ai", "@ai-sdk/openai", "@ai-sdk/anthropic", "zod")


@pytest.fixture(scope="module")
def node() -> str:
    """The `node` executable, the pinned npm clients beside it (`make node-client`)."""
    found = shutil.which("node")
    missing = [p for p in NODE_PACKAGES if not (NODE_DIR / "node_modules" / p).is_dir()]
    if found is None or missing:
        pytest.fail(f"node or the npm packages {missing} are missing: run `make node-client` "
                    "(Debian's nodejs + npm, then the pinned npm packages into tests/e2e/node)")
    return found
