"""Batches yield to people: with one sequence slot, an interactive request at the lowest
priority a client may ask for (X-TL-Priority -100) still runs before every batch request
that is waiting; only the batch request already running finishes first."""
from __future__ import annotations

import io
import json

from engine.api import EngineConfig
from server.batch.settings import BatchConfig
from tests.e2e.helpers import chat_body, metrics, openai_client, post, running_server
from tests.polling import wait_for

LINES = 12


def test_an_interactive_request_overtakes_the_waiting_batch_requests(succ_model_dir,
                                                                     tmp_path):
    with running_server(succ_model_dir, step_delay_s=0.02,
                        engine=EngineConfig(max_num_seqs=1),
                        batch=BatchConfig(dir=str(tmp_path), max_running=2)) as server:
        client = openai_client(server)
        lines = [{"custom_id": f"b-{i}", "method": "POST", "url": "/v1/chat/completions",
                  "body": {"model": "succ", "messages": [{"role": "user", "content": "a"}],
                           "max_tokens": 15, "ignore_eos": True}} for i in range(LINES)]
        data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id,
                                      endpoint="/v1/chat/completions",
                                      completion_window="24h")

        def answered() -> int:       # batch requests answered so far (a counter: monotonic)
            return int(metrics(server)['tl_batch_requests_total{outcome="done"}'])

        assert wait_for(lambda: answered() >= 1, timeout_s=30)
        before = answered()
        r = post(server, "/v1/chat/completions", chat_body("k", max_tokens=15, ignore_eos=True),
                 headers={"X-TL-Priority": "-100"})
        during = answered() - before
        assert r.status_code == 200
        assert during <= 1, f"{during} batch requests ran before the interactive one"
        assert before + during < LINES          # the batch was still going
        assert client.batches.retrieve(batch.id).status == "in_progress"
