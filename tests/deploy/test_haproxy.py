"""deploy/haproxy/haproxy.cfg: HAProxy itself accepts it (`haproxy -c`, installed by the
Makefile's `haproxy` target), and it says what the rolling restart relies on."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from tests.oracle import REPO_ROOT

CONFIG = REPO_ROOT / "deploy" / "haproxy" / "haproxy.cfg"
# a chat body HAProxy must be able to replay: 200 messages of 1 KiB
CHAT_BODY_BYTES = 200 * 1024
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
