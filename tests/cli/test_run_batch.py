"""`tlserve.py run-batch` as a user runs it, on the succ test model: every kind of bad line
answered with the server's own 400 document, a duplicate custom_id refused before any
request, and a run killed with SIGKILL halfway then run again: every custom_id exactly once."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys

import requests

from cli.batch import main as run_batch
from server.config import ServeConfig
from server.serve import spawn
from tests.oracle import REPO_ROOT
from tests.polling import wait_for

TIMEOUT_S = 60


def chat_line(custom_id: str, **body) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "succ", "messages": [{"role": "user", "content": "ab"}],
                     "max_tokens": 4, "temperature": 0, **body}}


def write_jsonl(path, rows) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def read_output(path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_bad_lines_get_the_servers_own_400_and_the_run_goes_on(succ_model_dir, tmp_path):
    invalid_body = {"model": "succ", "messages": [{"role": "user", "content": "ab"}],
                    "temperature": 9}
    rows = [chat_line("good"),
            "this is not json",
            {**chat_line("get"), "method": "GET"},
            {**chat_line("where"), "url": "/v1/nowhere"},
            {**chat_line("stream"), "body": {**chat_line("x")["body"], "stream": True}},
            {**chat_line("invalid"), "body": invalid_body},
            {**chat_line("x"), "custom_id": 12},
            {"custom_id": "completion", "method": "POST", "url": "/v1/completions",
             "body": {"model": "succ", "prompt": "ab", "max_tokens": 3, "temperature": 0}}]
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(given, rows)
    assert run_batch(["-i", str(given), "-o", str(out), "--model-dir", str(succ_model_dir)],
                     out=io.StringIO()) == 0
    by_id = {(o["custom_id"] or f"line {o['line']}"): o["response"] for o in read_output(out)}
    assert set(by_id) == {"good", "line 2", "get", "where", "stream", "invalid", "line 7",
                          "completion"}
    assert by_id["good"]["status_code"] == 200
    assert by_id["good"]["body"]["choices"][0]["message"]["content"] == "cdef"
    assert by_id["completion"]["body"]["choices"][0]["text"] == "cde"
    params = {key: by_id[key]["body"]["error"]["param"]
              for key in ("get", "where", "stream", "line 7")}
    assert params == {"get": "method", "where": "url", "stream": "body.stream",
                      "line 7": "custom_id"}
    assert by_id["line 2"]["body"]["error"]["code"] == "invalid_json"
    assert all(by_id[k]["status_code"] == 400 for k in by_id if k not in ("good", "completion"))
    # the same faults sent to a server of the same model get the same documents
    handle = spawn(ServeConfig.for_model(succ_model_dir))
    try:
        live = requests.post(handle.http_url + "/v1/chat/completions", json=invalid_body,
                             timeout=TIMEOUT_S)
        not_json = requests.post(handle.http_url + "/v1/chat/completions",
                                 data=b"this is not json", timeout=TIMEOUT_S)
    finally:
        handle.stop()
    assert (live.status_code, live.json()) == (400, by_id["invalid"]["body"])
    assert (not_json.status_code, not_json.json()) == (400, by_id["line 2"]["body"])


def test_a_duplicate_custom_id_refuses_the_file_before_any_request(tmp_path, capsys):
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(given, [chat_line("a"), chat_line("b"), chat_line("a"), chat_line("c"),
                        chat_line("b")])
    # no model at all: a run that loaded one, or sent a request, would fail otherwise
    code = run_batch(["-i", str(given), "-o", str(out), "--model-dir", str(tmp_path / "none")],
                     out=io.StringIO())
    assert code == 2
    err = capsys.readouterr().err
    assert "'a' on lines 1, 3" in err and "'b' on lines 2, 5" in err and "nothing was run" in err
    assert not out.exists()


def slow_run(succ_model_dir, tmp_path, total: int) -> tuple[list[str], subprocess.Popen]:
    """run-batch in a child process with slowed steps over `total` chat lines (4 in flight):
    its flags (to run it again) and the child."""
    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(given, [chat_line(f"t{i:02d}", max_tokens=6,
                                  messages=[{"role": "user", "content": chr(97 + i % 26)}])
                        for i in range(total)])
    flags = ["-i", str(given), "-o", str(out), "--model-dir", str(succ_model_dir),
             "--max-in-flight", "4"]
    child = subprocess.Popen([sys.executable, "-m", "tests.cli.child_run_batch", "0.05", *flags],
                             cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    return flags, child


def test_killed_halfway_and_run_again_every_custom_id_is_answered_once(succ_model_dir, tmp_path):
    total = 40
    out = tmp_path / "out.jsonl"
    flags, child = slow_run(succ_model_dir, tmp_path, total)
    try:
        assert wait_for(lambda: out.exists() and out.read_bytes().count(b"\n") >= 8,
                        timeout_s=TIMEOUT_S)
        child.send_signal(signal.SIGKILL)
        assert child.wait(TIMEOUT_S) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    before = out.read_bytes()
    done_before = before.count(b"\n")
    assert 8 <= done_before < total                  # killed halfway, not after the end
    with open(out, "ab") as handle:                  # as if the kill had cut a line in two
        handle.write(b'{"id":"batch_req_0","custom_id":"t99","respo')
    assert run_batch(flags, out=io.StringIO()) == 0
    after = out.read_bytes()
    assert after.startswith(before[:before.rfind(b"\n") + 1])   # earlier lines untouched
    ids = [o["custom_id"] for o in read_output(out)]
    assert sorted(ids) == [f"t{i:02d}" for i in range(total)]    # each exactly once
    assert all(o["response"]["status_code"] == 200 for o in read_output(out))


def test_sigterm_finishes_the_requests_in_flight_and_a_rerun_completes(succ_model_dir, tmp_path):
    total = 40
    out = tmp_path / "out.jsonl"
    flags, child = slow_run(succ_model_dir, tmp_path, total)
    try:
        assert wait_for(lambda: out.exists() and out.read_bytes().count(b"\n") >= 4,
                        timeout_s=TIMEOUT_S)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=TIMEOUT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 1, err
    assert "left: run again to resume" in err
    stopped = out.read_bytes()
    assert stopped.endswith(b"\n")                   # whole lines only: nothing was cut
    answered = stopped.count(b"\n")
    assert 4 <= answered < total
    assert f"run-batch: {answered} answered" in err
    assert run_batch(flags, out=io.StringIO()) == 0
    ids = [o["custom_id"] for o in read_output(out)]
    assert sorted(ids) == [f"t{i:02d}" for i in range(total)]
