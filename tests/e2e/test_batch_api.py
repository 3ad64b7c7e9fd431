"""The Batch API as a user drives it: the official `openai` client's files and batches
calls against a real server (succ model): upload, create, poll, download, list, cancel,
a file with bad lines and one with a duplicate custom_id, and /metrics."""
from __future__ import annotations

import io
import itertools
import json

import openai
import pytest
import requests

from server.batch.settings import BatchConfig
from tests.e2e.helpers import metrics, openai_client, running_server
from tests.polling import wait_for

TERMINAL = ("completed", "failed", "cancelled", "expired")


def chat_line(custom_id: str, content: str = "a", **body) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "succ", "messages": [{"role": "user", "content": content}],
                     "max_tokens": 3, "temperature": 0, **body}}


def jsonl(*lines) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n"
                    for line in lines)


@pytest.fixture(scope="module")
def server(succ_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("batch")
    with running_server(succ_model_dir, step_delay_s=0.01,
                        batch=BatchConfig(dir=str(folder), max_running=2)) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server, timeout_s=30)


def upload(client, data: bytes, name: str = "in.jsonl"):
    return client.files.create(file=(name, io.BytesIO(data)), purpose="batch")


def finished(client, batch_id: str, timeout_s: float = 30):
    return wait_for(lambda: (b := client.batches.retrieve(batch_id)).status in TERMINAL and b,
                    timeout_s=timeout_s, interval_s=0.05)


def output_lines(client, file_id: str | None) -> dict[str, dict]:
    if file_id is None:
        return {}
    rows = [json.loads(raw) for raw in client.files.content(file_id).text.splitlines()]
    return {row["custom_id"] if row["custom_id"] is not None else f"line {row['line']}": row
            for row in rows}


def test_upload_create_poll_download_list(client, server):
    data = jsonl(chat_line("t-1", "a"), chat_line("t-2", "k"),
                 chat_line("bad-temp", "a", temperature=5), b"{not json",
                 chat_line("t-3", "x"))
    uploaded = upload(client, data, name="../../etc/tickets.jsonl")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(data)
    assert uploaded.filename == "tickets.jsonl"            # a name, never a path
    assert client.files.retrieve(uploaded.id).id == uploaded.id
    assert client.files.content(uploaded.id).content == data

    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"job": "tickets"})
    assert batch.status == "validating" and batch.metadata == {"job": "tickets"}
    done = finished(client, batch.id)
    assert done and done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed,
            done.request_counts.failed) == (5, 3, 2)
    assert done.in_progress_at and done.finalizing_at and done.completed_at

    out = output_lines(client, done.output_file_id)
    assert sorted(out) == ["t-1", "t-2", "t-3"]
    contents = {cid: row["response"]["body"]["choices"][0]["message"]["content"]
                for cid, row in out.items()}
    assert contents == {"t-1": "bcd", "t-2": "lmn", "t-3": "yz{"}
    errors = output_lines(client, done.error_file_id)
    assert sorted(errors) == ["bad-temp", "line 4"]
    assert errors["bad-temp"]["response"]["status_code"] == 400
    assert errors["bad-temp"]["response"]["body"]["error"]["param"] == "temperature"
    assert errors["line 4"]["response"]["body"]["error"]["code"] == "invalid_json"

    listed = [f.id for f in client.files.list()]
    outputs = {f.id for f in client.files.list(purpose="batch_output")}
    assert outputs >= {done.output_file_id, done.error_file_id} and uploaded.id not in outputs
    assert {uploaded.id, done.output_file_id, done.error_file_id} <= set(listed)
    assert batch.id in [b.id for b in client.batches.list()]
    assert client.files.delete(uploaded.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)


def test_duplicate_custom_id_fails_naming_the_lines(client):
    data = jsonl(chat_line("same"), chat_line("other"), chat_line("same"))
    batch = client.batches.create(input_file_id=upload(client, data).id,
                                  endpoint="/v1/chat/completions", completion_window="24h")
    done = finished(client, batch.id)
    assert done and done.status == "failed" and done.failed_at
    [error] = done.errors.data
    assert error.code == "duplicate_custom_id" and "'same'" in error.message
    assert "1, 3" in error.message and error.line == 3
    assert done.output_file_id is None and done.request_counts.completed == 0


DONE = 'tl_batch_requests_total{outcome="done"}'
FAILED = 'tl_batch_requests_total{outcome="failed"}'


def test_cancel_keeps_what_was_answered(client, server):
    before = metrics(server)[DONE]
    lines = [chat_line(f"c-{i}", "a", max_tokens=40, ignore_eos=True) for i in range(30)]
    batch = client.batches.create(input_file_id=upload(client, jsonl(*lines)).id,
                                  endpoint="/v1/chat/completions", completion_window="24h")
    assert wait_for(lambda: metrics(server)[DONE] > before, timeout_s=30)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    done = finished(client, batch.id)
    assert done and done.status == "cancelled" and done.cancelled_at
    answered = output_lines(client, done.output_file_id)
    assert 1 <= len(answered) < 30
    assert done.request_counts.completed == len(answered) and done.request_counts.total == 30
    assert set(answered) <= {f"c-{i}" for i in range(30)}
    with pytest.raises(openai.APIStatusError) as refused:
        client.batches.cancel(_completed(client))
    assert refused.value.status_code == 409 and refused.value.code == "batch_not_cancellable"


def _completed(client) -> str:
    return next(b.id for b in client.batches.list() if b.status == "completed")


def test_bad_requests_get_clear_errors(client, server):
    with pytest.raises(openai.BadRequestError) as wrong_purpose:
        client.files.create(file=("x.jsonl", io.BytesIO(b"{}\n")), purpose="fine-tune")
    assert wrong_purpose.value.param == "purpose"
    with pytest.raises(openai.NotFoundError):
        client.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions",
                              completion_window="24h")
    file_id = upload(client, jsonl(chat_line("z"))).id
    with pytest.raises(openai.BadRequestError) as window:
        client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                              completion_window="1h")
    assert window.value.param == "completion_window"
    with pytest.raises(openai.BadRequestError) as endpoint:
        client.batches.create(input_file_id=file_id, endpoint="/v1/rerank",
                              completion_window="24h")
    assert endpoint.value.param == "endpoint"
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    raw = requests.post(server.http_url + "/v1/files", data=b"{}", timeout=10,
                        headers={"Content-Type": "application/json"})
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "file"


def test_metrics_count_batches_and_their_requests(client, server):
    before = metrics(server)
    lines = jsonl(chat_line("m-1"), chat_line("m-2"), chat_line("m-bad", temperature=5))
    batch = client.batches.create(input_file_id=upload(client, lines).id,
                                  endpoint="/v1/chat/completions", completion_window="24h")
    assert finished(client, batch.id).status == "completed"
    after = metrics(server)
    assert after['tl_batches{status="completed"}'] == before['tl_batches{status="completed"}'] + 1
    assert after[DONE] - before[DONE] == 3 and after[FAILED] - before[FAILED] == 1
    assert after["tl_batch_queue_depth"] == 0
    assert after['tl_batches{status="in_progress"}'] == 0


def test_an_engine_step_wakes_the_batch_worker_too(server):
    """The engine thread has one wake: it must reach the worker's streams as well as the
    loop's (else the worker would see each answer only at its longest wait)."""
    server.batch.wake.event.clear()
    server.bridge.wake()
    assert server.batch.wake.event.is_set()


def test_an_embeddings_batch(client):
    lines = [{"custom_id": f"e-{i}", "method": "POST", "url": "/v1/embeddings",
              "body": {"model": "succ", "input": text, "encoding_format": "float"}}
             for i, text in enumerate(["hello", "world"])]
    batch = client.batches.create(input_file_id=upload(client, jsonl(*lines)).id,
                                  endpoint="/v1/embeddings", completion_window="24h")
    done = finished(client, batch.id)
    assert done and done.status == "completed" and done.request_counts.completed == 2
    out = output_lines(client, done.output_file_id)
    direct = client.embeddings.create(model="succ", input="hello", encoding_format="float")
    assert out["e-0"]["response"]["body"]["data"][0]["embedding"] == direct.data[0].embedding


def test_an_upload_above_the_body_limit_streams_to_disk(succ_model_dir, tmp_path):
    """A 9 MiB file (the usual body limit is 8 MiB) with max_file_mib 10: stored whole,
    the spool emptied; 11 MiB is refused with 413 and leaves nothing behind."""
    row = json.dumps(chat_line("x" * 40)).encode() + b"\n"
    data = row * (9 * 2**20 // len(row) + 1)
    with running_server(succ_model_dir, batch=BatchConfig(dir=str(tmp_path),
                                                          max_file_mib=10)) as big:
        client = openai_client(big, timeout_s=60)
        uploaded = upload(client, data)
        assert uploaded.bytes == len(data) > 9 * 2**20
        assert client.files.content(uploaded.id).content == data
        with pytest.raises(openai.APIStatusError) as refused:
            upload(client, b"y" * (11 * 2**20))
        assert refused.value.status_code == 413
        assert list((tmp_path / "spool").iterdir()) == []
        assert [f.id for f in client.files.list()] == [uploaded.id]


def test_files_and_batches_lists_are_paged_as_openai_walks_them(client, server):
    ids = [upload(client, jsonl(chat_line(f"p{i}")), name=f"page-{i}.jsonl").id
           for i in range(3)]
    every = [f.id for f in client.files.list(order="asc")]          # one page, oldest first
    assert every == list(reversed([f.id for f in client.files.list()]))   # newest first
    walked = [f.id for f in itertools.islice(client.files.list(limit=1, order="asc"), 100)]
    assert walked == every and set(ids) <= set(walked)               # page by page, each once
    first = client.files.list(limit=2, order="asc", purpose="batch")
    assert first.has_more is True and len(first.data) == 2
    assert all(f.purpose == "batch" for f in first.data)
    batch_ids = [client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                       completion_window="24h").id for file_id in ids[:2]]
    walked_batches = [b.id for b in itertools.islice(client.batches.list(limit=1), 100)]
    assert set(batch_ids) <= set(walked_batches)
    assert len(walked_batches) == len(set(walked_batches))
    for query, param in (("limit=0", "limit"), ("limit=10001", "limit"), ("order=up", "order")):
        raw = requests.get(server.http_url + "/v1/files?" + query, timeout=10)
        assert raw.status_code == 400 and raw.json()["error"]["param"] == param
    raw = requests.get(server.http_url + "/v1/batches?limit=101", timeout=10)
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "limit"
    for batch_id in batch_ids:
        finished(client, batch_id)
