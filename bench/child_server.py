"""tlserve.py in a child process for the benchmarks: start it on free ports, read its
metrics, open raw streams against it, wait for it to be idle, stop it.

Shared by bench/pressure.py, load_server.py, soak.py and fuzz_http.py: a server in a process
of its own, so a benchmark's client never shares the server's interpreter.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.helpers import parse_metrics  # noqa: E402  (shared)

SERVER_LINE = re.compile(r"ready: API on (\S+), health on (\S+)")    # the model has loaded
DONE = b"data: [DONE]\n\n"
FREE_WITHIN_S = 2.0


class Server:
    """tlserve.py in a child process on free ports; its stderr is kept for the report."""

    def __init__(self, model_dir: str | None, env: dict[str, str], repo: Path = REPO):
        """`repo`: the checkout whose tlserve.py runs (another one: an A/B of two versions),
        with its own code first on the path (PYTHONPATH) and as the working directory."""
        cmd = [sys.executable, str(repo / "tlserve.py"), "--config", str(repo / "runtime.toml"),
               "--port", "0", "--health-port", "0"]
        if model_dir:
            cmd += ["--model-dir", model_dir]
        self.proc = subprocess.Popen(cmd, cwd=repo, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(repo), **env})
        self.log: list[str] = []
        self.http, self.health = self._wait_listening()
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def _wait_listening(self) -> tuple[tuple[str, int], str]:
        for line in self.proc.stderr:
            self.log.append(line)
            match = SERVER_LINE.search(line)
            if match:
                host, port = match.group(1).rsplit(":", 1)
                host = "127.0.0.1" if host in ("0.0.0.0", "") else host
                return (host, int(port)), "http://" + match.group(2).replace("0.0.0.0", "127.0.0.1")
        raise SystemExit("server did not start:\n" + "".join(self.log))

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.health + "/metrics", timeout=10) as r:
            return parse_metrics(r.read().decode())

    def idle_state(self) -> dict:
        m = self.metrics()
        return {"active_sequences": m["tl_engine_active_sequences"],
                "used_blocks": m['tl_engine_kv_blocks{state="used"}']}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def chat_payload(tokens: int, stream: bool = True) -> bytes:
    return json.dumps({"model": "smol-135m", "stream": stream, "max_tokens": tokens,
                       "ignore_eos": True, "temperature": 0,
                       "messages": [{"role": "user", "content": "Tell me a story."}]}).encode()


def open_raw_stream(addr: tuple[str, int], payload: bytes, model: str) -> socket.socket:
    payload = payload.replace(b'"smol-135m"', json.dumps(model).encode())
    sock = socket.create_connection(addr, timeout=600)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: " + str(len(payload)).encode() +
                 b"\r\n\r\n" + payload)
    return sock


def served_model(server: Server) -> str:
    with urllib.request.urlopen(f"http://{server.http[0]}:{server.http[1]}/v1/models",
                                timeout=30) as r:
        return json.load(r)["data"][0]["id"]


def post_json(server: Server, path: str, body: dict) -> tuple[dict, float]:
    """POST a JSON body to the API; (the answer, seconds it took)."""
    request = urllib.request.Request(f"http://{server.http[0]}:{server.http[1]}{path}",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as r:
        return json.load(r), time.monotonic() - started


def idle_after(server: Server, within_s: float = FREE_WITHIN_S) -> dict:
    """The idle state once the cut chat's abort has gone through (or as it is after `within_s`)."""
    deadline = time.monotonic() + within_s
    state = server.idle_state()
    while (state["active_sequences"] or state["used_blocks"]) and time.monotonic() < deadline:
        time.sleep(0.05)
        state = server.idle_state()
    return state


def rss_mib(pid: int) -> float:
    """A process's resident memory (VmRSS) in MiB; 0 once it is gone."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a child server's listener)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
