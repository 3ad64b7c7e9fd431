"""deploy/haproxy/haproxy.cfg: HAProxy itself accepts it (`haproxy -c`, installed by the
Makefile's `haproxy` target), and it says what the rolling restart relies on."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

from server.config import ServeConfig
from tests.oracle import REPO_ROOT

CONFIG = REPO_ROOT / "deploy" / "haproxy" / "haproxy.cfg"
# a chat body HAProxy must be able to replay: 200 messages of 1 KiB
CHAT_BODY_BYTES = 200 * 1024
BENCH = REPO_ROOT / "bench" / "rolling_restart.py"
# the slowest per-stream rate seen: smol-135m, 16 streams per replica, 3 replicas on 2 cores
# (about 0.7 tokens/s each; the drain-timeout cuts of the first measured run)
SLOW_STREAM_TOKENS_PER_S = 0.5
HAPROXY_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
ENV = {"TL_LB_BIND": "127.0.0.1:18000",
       **{f"TL_R{i}_API": f"127.0.0.1:1800{i}" for i in (1, 2, 3)},
       **{f"TL_R{i}_HEALTH_PORT": f"1900{i}" for i in (1, 2, 3)}}


def test_haproxy_accepts_the_config():
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    done = subprocess.run([haproxy, "-c", "-f", str(CONFIG)], capture_output=True, text=True,
                          env={**os.environ, **ENV}, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    # and refuses a broken one (the check is real)
    done = subprocess.run([haproxy, "-c", "-f", "/dev/stdin"], input="backend x\n  balance nope\n",
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0


def test_the_config_states_the_rolling_restart_rules():
    text = CONFIG.read_text()
    lines = [ln.split("#")[0].strip() for ln in text.splitlines()]
    assert "balance leastconn" in lines
    assert "option httpchk GET /readyz" in lines
    retry_on = next(ln for ln in lines if ln.startswith("retry-on "))
    assert set(retry_on.split()[1:]) == {"conn-failure", "empty-response", "503"}
    assert "option redispatch 1" in lines
    bufsize = int(next(ln for ln in lines if ln.startswith("tune.bufsize")).split()[1])
    assert bufsize >= CHAT_BODY_BYTES
    default_server = next(ln for ln in lines if ln.startswith("default-server"))
    assert re.search(r"\bmaxconn \d+", default_server) and "fall 1" in default_server
    servers = [ln for ln in lines if ln.startswith("server ")]
    assert len(servers) == 3 and all("check port" in s for s in servers)
    assert any(ln.startswith("timeout queue") for ln in lines)


def timeout_s(lines: list[str], name: str) -> float:
    """`timeout NAME 600s` in seconds (HAProxy's default unit is milliseconds)."""
    value = next(ln for ln in lines if ln.startswith(f"timeout {name} ")).split()[2]
    number, unit = re.fullmatch(r"(\d+)([a-z]*)", value).groups()
    return int(number) * HAPROXY_UNIT_S[unit or "ms"]


def test_haproxy_timeouts_outlast_a_silent_stream():
    """A stream is silent until scheduled (its head comes with the first token, up to the
    queue deadline), then pings: HAProxy must not cut it as idle on either side."""
    lines = [ln.split("#")[0].strip() for ln in CONFIG.read_text().splitlines()]
    served = ServeConfig()
    longest_silence_s = max(served.queue_deadline_ms / 1000, served.ping_interval_s)
    assert timeout_s(lines, "server") > longest_silence_s
    assert timeout_s(lines, "client") > longest_silence_s
    assert timeout_s(["timeout x 2m"], "x") == 120 and timeout_s(["timeout x 500"], "x") == 0.5


def load_bench():
    spec = importlib.util.spec_from_file_location("rolling_restart", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_rolling_restart_drain_outlasts_its_streams():
    """The first measured run drained with 30 s and cut 15 streams after their 200: the
    drain must cover a request admitted just before SIGTERM (a queue wait, then all its
    tokens at the slowest rate seen), and the client must wait out the silent queue."""
    bench = load_bench()
    queue_deadline_s = ServeConfig().queue_deadline_ms / 1000
    assert bench.QUEUE_DEADLINE_S == queue_deadline_s
    longest_stream_s = queue_deadline_s + bench.MAX_TOKENS / SLOW_STREAM_TOKENS_PER_S
    assert bench.DRAIN_TIMEOUT_S >= longest_stream_s
    assert bench.CLIENT_TIMEOUT_S > max(queue_deadline_s, ServeConfig().ping_interval_s)
