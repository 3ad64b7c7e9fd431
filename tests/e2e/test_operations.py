"""Operations over real sockets: API key, CORS on streams, the access log, the loading
state, honest start-up failures, sampling defaults, --version."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
import requests

from server import serve
from server.config import ServeConfig
from server.serve import StartupError, bind, load
from tests.e2e.helpers import (TIMEOUT_S, chat_body, post, read_startup, running_server,
                               stream_chunks, taken_port)
from tests.oracle import REPO_ROOT

KEY = "sk-e2e-secret-42"
STEP_DELAY_S = 0.01            # each engine step at least this long: a floor for the timings
ROUNDING_MS = 0.1              # the access log rounds its times to 0.1 ms


def test_api_key_cors_and_access_log_on_a_real_server(succ_model_dir, tmp_path, caplog):
    log_file = tmp_path / "access.jsonl"
    with running_server(succ_model_dir, api_key=KEY, cors_allow_origins="https://ui.example",
                        access_log=str(log_file), step_delay_s=STEP_DELAY_S) as server:
        r = post(server, "/v1/chat/completions", chat_body("a", max_tokens=2))
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        auth = {"Authorization": f"Bearer {KEY}", "Origin": "https://ui.example",
                "X-Request-Id": "rid-stream-1"}
        sent_s = time.monotonic()              # the server runs in this process: same clock
        r = post(server, "/v1/chat/completions",
                 chat_body("a", max_tokens=3, temperature=0, stream=True), headers=auth)
        client_ms = (time.monotonic() - sent_s) * 1000
        assert r.status_code == 200
        assert r.headers["Access-Control-Allow-Origin"] == "https://ui.example"
        chunks, done = stream_chunks(r)
        assert done
        stream_body_bytes = len(r.content)
        r = requests.options(server.http_url + "/v1/chat/completions", timeout=TIMEOUT_S,
                             headers={"Origin": "https://ui.example",
                                      "Access-Control-Request-Method": "POST"})
        assert r.status_code == 204
        assert r.headers["Access-Control-Allow-Origin"] == "https://ui.example"
        # the health port needs no key
        assert requests.get(server.health_url + "/readyz", timeout=TIMEOUT_S).status_code == 200
        assert requests.get(server.http_url + "/healthz", timeout=TIMEOUT_S).status_code == 200
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [r["status"] for r in records] == [401, 200, 204, 200]
    stream = records[1]
    assert stream["request_id"] == "rid-stream-1" and stream["model"] == "succ"
    assert stream["prompt_tokens"] == 1 and stream["completion_tokens"] == 3
    assert stream["finish_reason"] == "length"
    # The timings, in milliseconds: the first token needs one step after the request arrived,
    # the other two one step each after it, and the server's span lies inside the client's.
    step_ms = STEP_DELAY_S * 1000
    assert step_ms <= stream["ttft_ms"]
    assert stream["ttft_ms"] + 2 * step_ms <= stream["duration_ms"] + ROUNDING_MS
    assert stream["duration_ms"] <= client_ms + ROUNDING_MS
    assert stream["bytes_sent"] == stream_body_bytes         # body bytes, before chunking
    assert stream["client"].startswith("127.0.0.1:")
    assert records[0]["error"] and KEY not in log_file.read_text()
    assert all(KEY not in rec.getMessage() for rec in caplog.records)


def test_listeners_answer_while_the_model_loads(succ_model_dir):
    cfg = ServeConfig.for_model(succ_model_dir)
    handle = bind(cfg)
    thread = threading.Thread(target=handle.loop.run, daemon=True)
    thread.start()
    try:
        get = lambda url: requests.get(url, timeout=TIMEOUT_S)   # noqa: E731
        assert get(handle.health_url + "/healthz").status_code == 200
        assert get(handle.health_url + "/readyz").status_code == 503
        r = post(handle, "/v1/chat/completions", chat_body("a", max_tokens=1))
        assert r.status_code == 503 and r.headers["Retry-After"]
        assert r.json()["error"]["code"] == "model_loading"
        load(cfg, handle)
        handle.bridge.start()
        assert get(handle.health_url + "/readyz").status_code == 200
        r = post(handle, "/v1/chat/completions", chat_body("a", max_tokens=2, temperature=0))
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "bc"
    finally:
        handle.loop.stop()
        thread.join(10)
        handle.join(10)


def test_a_taken_port_is_bound_once_and_nothing_loads(succ_model_dir, monkeypatch):
    """No retries and no model load (bench/serving_stalls.py times the refusal): serving a
    taken address tries it once and stops before the model loader is called."""
    loads, binds = [], []
    monkeypatch.setattr(serve, "load_models", lambda *args: loads.append(args))
    real_bind = socket.socket.bind

    def counted_bind(sock, address):
        binds.append(address)
        return real_bind(sock, address)
    with taken_port() as port:
        monkeypatch.setattr(socket.socket, "bind", counted_bind)
        cfg = replace(ServeConfig.for_model(succ_model_dir), health_listen=f"127.0.0.1:{port}")
        with pytest.raises(StartupError, match=f"127.0.0.1:{port}"):
            serve.run(cfg)
    assert [a for a in binds if a[1] == port] == [("127.0.0.1", port)] and loads == []


def test_a_taken_port_fails_at_once_naming_address_and_key(succ_model_dir):
    with taken_port() as port:
        cfg = replace(ServeConfig.for_model(succ_model_dir), health_listen=f"127.0.0.1:{port}")
        with pytest.raises(StartupError) as info:
            bind(cfg)                   # binding comes before the model: nothing loads
        message = str(info.value)
        assert f"127.0.0.1:{port}" in message and "[engine].health_listen" in message
        # the command line: one line on stderr, exit 1, long before a model could load
        done = subprocess.run([sys.executable, "tlserve.py", "--model-dir", str(succ_model_dir),
                               "--port", str(port)], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 1
        assert f"127.0.0.1:{port}" in done.stderr and "[engine].http_listen" in done.stderr
        assert "Traceback" not in done.stderr and "model succ loaded" not in done.stderr


def test_a_missing_model_is_one_line_with_the_fetch_command(tmp_path):
    missing = tmp_path / "no-model-here"
    done = subprocess.run([sys.executable, "tlserve.py", "--model-dir", str(missing)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("tlserve: "), done.stderr
    assert str(missing) in done.stderr and "fetch-model" in done.stderr
    unreadable = tmp_path / "broken"
    unreadable.mkdir()
    (unreadable / "model.gguf").write_bytes(b"not a gguf at all")
    done = subprocess.run([sys.executable, "tlserve.py", "--model-dir", str(unreadable),
                           "--port", "0", "--health-port", "0"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("tlserve: ")]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr
    assert str(unreadable) in lines[0] and "fetch-model" in lines[0]


def test_a_model_asking_for_unserved_maths_is_refused_by_name_without_the_fetch_hint(
        succ_model_dir, tmp_path):
    """Present and well formed, but it needs maths this server does not do: the one line
    names the key and the file, and does not send the user to fetch a model."""
    capped = tmp_path / "capped"
    shutil.copytree(succ_model_dir, capped)
    config = json.loads((capped / "config.json").read_text())
    (capped / "config.json").write_text(json.dumps({**config, "attn_logit_softcapping": 50.0}))
    done = subprocess.run([sys.executable, "tlserve.py", "--model-dir", str(capped),
                           "--port", "0", "--health-port", "0"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("tlserve: ")]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr
    assert "attn_logit_softcapping" in lines[0] and "config.json" in lines[0]
    assert "fetch-model" not in lines[0]


def test_version_and_start_up_log_of_changed_keys(succ_model_dir, tmp_path):
    done = subprocess.run([sys.executable, "tlserve.py", "--version"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("tl-serve ")
    # relative paths resolve against the config file's directory, not the current one
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "key.txt").write_text(KEY + "\n")
    config = conf_dir / "serve.toml"
    relative = "../" + succ_model_dir.name
    (tmp_path / succ_model_dir.name).symlink_to(succ_model_dir)
    config.write_text(f'[engine]\nmodel_dir = "{relative}"\napi_key_file = "key.txt"\n'
                      'http_listen = "127.0.0.1:0"\nhealth_listen = "127.0.0.1:0"\n'
                      'queue_capacity = 7\n[defaults]\nmax_tokens = 5\n')
    proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "tlserve.py"), "--config",
                             str(config)], cwd=REPO_ROOT / "tests", stderr=subprocess.PIPE,
                            text=True)
    try:
        text = read_startup(proc, 120)
        assert " ready: " in text, text
        assert f"config file: {config}" in text
        assert "[engine].queue_capacity = 7" in text and "[defaults].max_tokens = 5" in text
        assert "[engine].api_key = <redacted>" in text and KEY not in text
        assert "[engine].block_size" not in text                  # unchanged keys are not listed
        assert "sampling defaults: {'max_tokens': 5}" in text
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0


def test_sampling_defaults_from_config_and_generation_config(succ_model_dir, tmp_path):
    model = tmp_path / "succ"
    model.mkdir()
    for f in succ_model_dir.iterdir():
        (model / f.name).symlink_to(f)
    (model / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.0, "max_new_tokens": 4, "top_p": 7}))      # top_p out of range: skipped
    with running_server(model) as server:
        body = {"model": "succ", "prompt": "a", "ignore_eos": True}
        doc = post(server, "/v1/completions", body).json()
        assert doc["usage"]["completion_tokens"] == 4                # not completions' 16
        assert doc["choices"][0]["text"] == "bcde"                   # temperature 0: greedy
        chat = post(server, "/v1/chat/completions", chat_body("a", ignore_eos=True)).json()
        assert chat["usage"]["completion_tokens"] == 4
        # a request's own value wins
        doc = post(server, "/v1/completions", {**body, "max_tokens": 2}).json()
        assert doc["usage"]["completion_tokens"] == 2
    with running_server(model, default_overrides=(("max_tokens", 3),)) as server:
        doc = post(server, "/v1/completions", {"model": "succ", "prompt": "a",
                                               "ignore_eos": True}).json()
        assert doc["usage"]["completion_tokens"] == 3                # the config beats the file
