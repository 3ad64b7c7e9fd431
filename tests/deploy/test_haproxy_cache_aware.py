"""deploy/haproxy/cache-aware.cfg run for real: HAProxy (Debian's 2.6, `make haproxy`) in
front of three tiny HTTP backends that answer with their own name. One affinity key always
reaches one replica, whichever of the four sources it comes from; different keys spread
over all three; a replica taken out moves only its own keys (and gets them back); a busy
replica's hot key spills over (the bounded load); a request without a key is balanced by
least connections. The replica is taken out through HAProxy's runtime API (a test-only
stats socket in a second config file), which acts at once: no waiting on health checks.

HAProxy counts a request as open on its replica until it has freed the request's stream,
which can be a moment after the client has read the answer. The load bound reads that
count (with one request open, each of three replicas has one slot), so a test that sends
the next request in that moment would see it spill: every send first waits, through the
same runtime API, until HAProxy counts only the requests the test means to hold open."""
from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.oracle import REPO_ROOT
from tests.polling import wait_for

CONFIG = REPO_ROOT / "deploy" / "haproxy" / "cache-aware.cfg"
NAMES = ("r1", "r2", "r3")
TIMEOUT_S = 30
SPREAD_KEYS = 90                # each replica owns a share of these; none owns few
MIN_SHARE = 1 / 6               # of the keys, at least, per replica (an even split is 1/3)


class QuietServer(ThreadingHTTPServer):
    """HAProxy's health checks close with a reset: not worth a traceback."""
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Replica:
    """A backend: its API port answers any request with its name and keeps what it got;
    its health port answers /readyz 200. A body with "hold": true is answered only once
    `release` is set (`arrived` tells the test it is in)."""

    def __init__(self, name: str):
        self.name, self.bodies = name, []
        self.arrived, self.release = threading.Event(), threading.Event()
        self.api = QuietServer(("127.0.0.1", 0), self._handler(api=True))
        self.health = QuietServer(("127.0.0.1", 0), self._handler(api=False))
        for server in (self.api, self.health):
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def _handler(self, api: bool):
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                self._answer()

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                replica.bodies.append(body)
                if b'"hold": true' in body:
                    replica.arrived.set()
                    replica.release.wait(TIMEOUT_S)
                self._answer()

            def _answer(self):
                if not api and self.path != "/readyz":
                    self.send_error(404)
                    return
                data = json.dumps({"replica": replica.name}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass
        return Handler

    def close(self) -> None:
        self.release.set()
        for server in (self.api, self.health):
            server.shutdown()
            server.server_close()


class Balancer:
    """HAProxy with cache-aware.cfg in front of the replicas, plus an admin socket."""

    def __init__(self, replicas: list[Replica], workdir: Path):
        self.replicas = replicas
        self.socket_path = workdir / "admin.sock"
        extra = workdir / "runtime-api.cfg"
        extra.write_text(f"global\n    stats socket {self.socket_path} level admin\n")
        with socket.socket() as probe:          # a free port for HAProxy's own listener
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = {**os.environ, "TL_LB_BIND": f"127.0.0.1:{self.port}"}
        for i, r in enumerate(replicas, 1):
            env[f"TL_R{i}_API"] = f"127.0.0.1:{r.api.server_address[1]}"
            env[f"TL_R{i}_HEALTH_PORT"] = str(r.health.server_address[1])
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.proc = subprocess.Popen([haproxy, "-db", "-f", str(CONFIG), "-f", str(extra)],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def send(self, body: dict | None = None, headers: dict | None = None,
             path: str = "/v1/chat/completions", open_requests: int = 0) -> str:
        """The name of the replica that answered, once HAProxy counts `open_requests`
        requests open (the ones the test holds) before this one is sent."""
        assert wait_for(lambda: self.open_requests() == open_requests, TIMEOUT_S), \
            (self.open_requests(), open_requests)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT_S)
        try:
            if body is None:
                conn.request("GET", path, headers=headers or {})
            else:
                conn.request("POST", path, json.dumps(body).encode(),
                             {"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            assert response.status == 200, (response.status, response.read())
            return json.loads(response.read())["replica"]
        finally:
            conn.close()

    def runtime(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket_path))
            s.sendall(command.encode() + b"\n")
            return b"".join(iter(lambda: s.recv(4096), b"")).decode()

    def open_requests(self) -> int:
        """Requests HAProxy counts open on the replicas, over all three backends (the
        `scur` column of each server's row in `show stat`)."""
        rows = self.runtime("show stat").lstrip("# ").splitlines()
        header = rows[0].split(",")
        name, current = header.index("svname"), header.index("scur")
        return sum(int(row.split(",")[current]) for row in rows[1:]
                   if row and row.split(",")[name] in NAMES)

    def up(self) -> bool:
        try:
            return self.proc.poll() is None and self.send({"prompt_cache_key": "probe"}) in NAMES
        except (OSError, AssertionError):
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(TIMEOUT_S)


@pytest.fixture(scope="module")
def lb(tmp_path_factory):
    replicas = [Replica(name) for name in NAMES]
    balancer = Balancer(replicas, tmp_path_factory.mktemp("haproxy"))
    try:
        assert wait_for(balancer.up, timeout_s=TIMEOUT_S), balancer.proc.stdout.read1()
        yield balancer
    finally:
        balancer.stop()
        for r in replicas:
            r.close()


def chat(key: str | None = None, **fields) -> dict:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], **fields}
    if key is not None:
        body["prompt_cache_key"] = key
    return body


def placement(lb, keys) -> dict[str, str]:
    return {key: lb.send(chat(key)) for key in keys}


def test_one_key_always_reaches_one_replica_from_each_of_its_sources(lb):
    for key in ("conv-1", "conv-2", "conv-3"):
        assert len({lb.send(chat(key, user=f"u{i}")) for i in range(6)}) == 1
    assert len({lb.send(chat(), headers={"x-session-token": "s-9"}) for _ in range(6)}) == 1
    assert len({lb.send(chat(user="alice")) for _ in range(6)}) == 1
    shared = "You are the support assistant of a bicycle shop. " * 8     # > 256 bytes
    replies = {lb.send({"model": "m", "messages": [{"role": "system", "content": shared},
                                                  {"role": "user", "content": f"q{i}"}]})
               for i in range(6)}
    assert len(replies) == 1                      # one shared system prompt, one replica
    assert len({lb.send({"model": "m", "prompt": shared + str(i)}) for i in range(6)}) == 1
    # the order of the sources: the key before the header before the user
    keyed = lb.send(chat("conv-1"))
    assert lb.send(chat("conv-1", user="alice"), headers={"x-session-token": "s-9"}) == keyed


def test_different_keys_spread_over_every_replica(lb):
    counts = Counter(placement(lb, [f"conversation-{i}" for i in range(SPREAD_KEYS)]).values())
    assert set(counts) == set(NAMES)
    assert min(counts.values()) >= SPREAD_KEYS * MIN_SHARE, counts


def test_a_replica_taken_out_moves_only_its_own_keys(lb):
    keys = [f"session-{i}" for i in range(60)]
    before = placement(lb, keys)
    assert lb.runtime("disable server tlserve_affinity/r3").strip() == ""
    try:
        during = placement(lb, keys)
    finally:
        lb.runtime("enable server tlserve_affinity/r3")
    moved = {k for k in keys if during[k] != before[k]}
    assert moved == {k for k in keys if before[k] == "r3"} and moved   # r3's keys, only them
    assert "r3" not in during.values()
    assert placement(lb, keys) == before                            # back where they were


def test_a_busy_replica_spills_a_hot_key_and_keeps_it_once_free(lb):
    home = lb.send(chat("hot"))
    replica = next(r for r in lb.replicas if r.name == home)
    replica.arrived.clear()
    replica.release.clear()
    held: list[str] = []
    thread = threading.Thread(target=lambda: held.append(lb.send(chat("hot", hold=True))))
    thread.start()
    try:
        assert replica.arrived.wait(TIMEOUT_S)                  # one request open on `home`
        spilled = lb.send(chat("hot"), open_requests=1)
    finally:
        replica.release.set()
        thread.join(TIMEOUT_S)
    assert held == [home] and spilled != home                  # over 1.5x the average load
    assert lb.send(chat("hot")) == home                        # idle again: home again


def test_requests_without_a_key_go_to_the_least_loaded_replica(lb):
    for r in lb.replicas:
        r.arrived.clear()
        r.release.clear()
    thread = threading.Thread(target=lb.send, args=({"model": "m", "hold": True},))  # no key
    thread.start()
    try:
        assert wait_for(lambda: [r for r in lb.replicas if r.arrived.is_set()], TIMEOUT_S)
        busy = next(r for r in lb.replicas if r.arrived.is_set())
        others = [lb.send(path="/v1/models", open_requests=1) for _ in range(6)]
    finally:
        for r in lb.replicas:
            r.release.set()
        thread.join(TIMEOUT_S)
    # round robin would come back to the busy replica every third request
    assert busy.name not in others and set(others) <= set(NAMES)
