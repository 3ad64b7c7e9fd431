"""Nothing lost: a server killed (SIGKILL) or drained (SIGTERM) mid-batch and started again
on the same [batch].dir finishes the batch with each custom_id answered exactly once."""
from __future__ import annotations

import io
import json
import signal
from collections import Counter
from pathlib import Path

from tests.e2e.helpers import TIMEOUT_S, child_server, openai_client
from tests.polling import wait_for

LINES = 24


def batch_file() -> bytes:
    lines = [{"custom_id": f"r-{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "succ", "messages": [{"role": "user", "content": "a"}],
                       "max_tokens": 20, "ignore_eos": True, "temperature": 0}}
             for i in range(LINES)]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def answered_so_far(folder: Path, batch_id: str) -> int:
    path = folder / "batches" / f"{batch_id}.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def start_batch(server) -> str:
    client = openai_client(server)
    uploaded = client.files.create(file=("in.jsonl", io.BytesIO(batch_file())),
                                   purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                 completion_window="24h").id


def finish_after_restart(succ_model_dir, env: dict, batch_id: str) -> Counter:
    with child_server(succ_model_dir, env=env) as again:
        client = openai_client(again)
        done = wait_for(lambda: (b := client.batches.retrieve(batch_id)).status
                        in ("completed", "failed") and b, timeout_s=60, interval_s=0.1)
        assert done and done.status == "completed", done
        assert (done.request_counts.total, done.request_counts.completed) == (LINES, LINES)
        rows = client.files.content(done.output_file_id).text.splitlines()
    assert done.error_file_id is None
    return Counter(json.loads(row)["custom_id"] for row in rows)


def test_a_killed_server_resumes_the_batch(succ_model_dir, tmp_path):
    env = {"TL_BATCH__DIR": str(tmp_path), "TL_BATCH__MAX_RUNNING": "2"}
    with child_server(succ_model_dir, step_delay_s=0.02, env=env) as server:
        batch_id = start_batch(server)
        assert wait_for(lambda: answered_so_far(tmp_path, batch_id) >= 3, timeout_s=TIMEOUT_S)
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(TIMEOUT_S)
    left_by_the_kill = answered_so_far(tmp_path, batch_id)
    assert 3 <= left_by_the_kill < LINES
    ids = finish_after_restart(succ_model_dir, env, batch_id)
    assert ids == Counter({f"r-{i}": 1 for i in range(LINES)})


def test_a_drained_server_finishes_in_flight_requests_and_resumes(succ_model_dir, tmp_path):
    env = {"TL_BATCH__DIR": str(tmp_path), "TL_BATCH__MAX_RUNNING": "2"}
    with child_server(succ_model_dir, step_delay_s=0.02, env=env) as server:
        batch_id = start_batch(server)
        assert wait_for(lambda: answered_so_far(tmp_path, batch_id) >= 2, timeout_s=TIMEOUT_S)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(TIMEOUT_S) == 0
    state = json.loads((tmp_path / "batches" / f"{batch_id}.json").read_bytes())
    assert state["status"] == "in_progress"
    answered = answered_so_far(tmp_path, batch_id)
    assert 2 <= answered < LINES
    assert state["completed"] == answered          # checkpointed at the stop
    ids = finish_after_restart(succ_model_dir, env, batch_id)
    assert ids == Counter({f"r-{i}": 1 for i in range(LINES)})
