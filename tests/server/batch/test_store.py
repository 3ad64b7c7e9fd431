"""The Batch API's store (server/batch/store.py) and worker (worker.py) without a server:
objects that survive a reopen, names that are never paths, the quota, atomic writes, and
the worker's status moves for a batch that expires, a file with a duplicate id, a line
for another endpoint, and a whole run through a scripted App."""
from __future__ import annotations

import json

import pytest

from server.batch.runner import Wake
from server.batch.store import BatchStore, StoreFull, safe_filename, stamped
from server.batch.worker import BATCH_PRIORITY, BatchWorker
from server.api.generation import MAX_PRIORITY
from server.http.protocol import Request, Response

DAY_S = 24 * 3600


class Clock:
    def __init__(self, now_s: float = 1_000_000.0):
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


class EchoApp:
    """Answers each request at once with 200 and its own body (a whole Response)."""

    def __init__(self):
        self.requests: list[Request] = []

    def handle(self, request: Request) -> Response:
        self.requests.append(request)
        return Response(status=200, body=json.dumps({"echo": json.loads(request.body)}).encode())

    def error(self, kind, message, headers=()):
        raise AssertionError("no transport errors here")


def line(custom_id: str, url: str = "/v1/chat/completions", **body) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url,
                       "body": {"model": "m", **body}}).encode() + b"\n"


def new_batch(store: BatchStore, data: bytes, expires_in_s: int = DAY_S):
    uploaded = store.add_file("in.jsonl", "batch", data)
    return store.new_batch(endpoint="/v1/chat/completions", input_file_id=uploaded.id,
                           completion_window="24h", expires_at=store.now() + expires_in_s)


def advance_to_end(worker: BatchWorker, store: BatchStore, batch_id: str, steps: int = 5):
    """The worker's thread body, run here one step at a time (no thread, no waits)."""
    for _ in range(steps):
        record = store.batch(batch_id)
        if record.is_done:
            return record
        worker._advance(record)
    return store.batch(batch_id)


def test_files_and_batches_survive_a_reopen(tmp_path):
    clock = Clock()
    store = BatchStore(tmp_path, max_dir_bytes=2**20, clock=clock)
    record = new_batch(store, line("a"))
    store.update(record.id, lambda r: stamped(r, "in_progress", store.now(), total=1))
    again = BatchStore(tmp_path, max_dir_bytes=2**20, clock=clock)
    assert again.batch(record.id).status == "in_progress"
    assert again.batch(record.id).in_progress_at == int(clock.now_s)
    assert [f.id for f in again.files()] == [record.input_file_id]
    assert again.file_path(record.input_file_id).read_bytes() == line("a")
    assert not list(tmp_path.rglob("*.tmp"))          # every write moved into place


def test_a_filename_is_a_name_never_a_path():
    assert safe_filename("../../etc/passwd") == "passwd"
    assert safe_filename("C:\\Users\\x\\in.jsonl") == "in.jsonl"
    assert safe_filename("..") == "upload.jsonl" and safe_filename("a/") == "upload.jsonl"
    assert safe_filename("t\x00ab\n.jsonl") == "tab.jsonl"


def test_the_quota_refuses_what_would_pass_it(tmp_path):
    store = BatchStore(tmp_path, max_dir_bytes=100)
    store.add_file("a", "batch", b"x" * 60)
    with pytest.raises(StoreFull):
        store.add_file("b", "batch", b"x" * 41)
    store.add_file("c", "batch", b"x" * 40)            # exactly at the quota
    assert len(store.files()) == 2


def test_a_whole_batch_with_a_bad_line(tmp_path):
    store = BatchStore(tmp_path, max_dir_bytes=2**20)
    app = EchoApp()
    worker = BatchWorker(store, app, Wake(), max_running=2)
    record = new_batch(store, line("a") + b"not json\n" + line("b"))
    done = advance_to_end(worker, store, record.id)
    assert done.status == "completed" and (done.total, done.completed, done.failed) == (3, 2, 1)
    good = [json.loads(r) for r in store.file_path(done.output_file_id).read_bytes().splitlines()]
    assert sorted(r["custom_id"] for r in good) == ["a", "b"]
    [bad] = [json.loads(r) for r in store.file_path(done.error_file_id).read_bytes().splitlines()]
    assert bad["line"] == 2 and bad["response"]["status_code"] == 400
    assert not store.output_path(record.id).exists()  # the running lines folded into files
    assert worker.stats.read() == (3, 1, 0)


def test_a_batch_past_its_window_expires_unrun(tmp_path):
    clock = Clock()
    store = BatchStore(tmp_path, max_dir_bytes=2**20, clock=clock)
    app = EchoApp()
    worker = BatchWorker(store, app, Wake(), max_running=2)
    record = new_batch(store, line("a"))
    clock.now_s += DAY_S
    done = advance_to_end(worker, store, record.id)
    assert done.status == "expired" and done.expired_at == int(clock.now_s)
    assert app.requests == [] and done.output_file_id is None


def test_validation_names_duplicate_lines_and_foreign_endpoints(tmp_path):
    store = BatchStore(tmp_path, max_dir_bytes=2**20)
    worker = BatchWorker(store, EchoApp(), Wake(), max_running=1)
    twice = advance_to_end(worker, store, new_batch(store, line("x") + line("y") + line("x")).id)
    assert twice.status == "failed" and twice.failed_at
    assert [(e.code, e.line) for e in twice.errors] == [("duplicate_custom_id", 3)]
    assert "1, 3" in twice.errors[0].message
    other = advance_to_end(worker, store, new_batch(
        store, line("p") + line("q", url="/v1/embeddings")).id)
    assert other.status == "failed"
    assert [(e.code, e.line, e.param) for e in other.errors] == [("mismatched_endpoint", 2, "url")]


def test_batch_priority_is_below_every_client_priority():
    assert BATCH_PRIORITY < -MAX_PRIORITY


def test_finalizing_twice_replaces_the_outputs(tmp_path):
    """A restart while finalizing runs it again: the same two files, never two more."""
    store = BatchStore(tmp_path, max_dir_bytes=2**20)
    worker = BatchWorker(store, EchoApp(), Wake(), max_running=1)
    record = new_batch(store, line("a") + b"not json\n")
    done = advance_to_end(worker, store, record.id)
    files_before = {f.id for f in store.files()}
    store.output_path(record.id).write_bytes(
        store.file_path(done.output_file_id).read_bytes()
        + store.file_path(done.error_file_id).read_bytes())
    worker._finalize(done, "completed")
    assert {f.id for f in store.files()} == files_before
    assert store.batch(record.id).output_file_id == done.output_file_id


class ExpiringApp(EchoApp):
    """EchoApp whose `expire_at`-th request moves the clock past the batch's window (the
    request itself is answered: it was already dispatched)."""

    def __init__(self, clock: Clock, expire_at: int):
        super().__init__()
        self.clock, self.expire_at = clock, expire_at

    def handle(self, request: Request) -> Response:
        if len(self.requests) + 1 == self.expire_at:
            self.clock.now_s += DAY_S
        return super().handle(request)


def test_a_batch_whose_window_passes_while_it_runs_expires(tmp_path):
    clock = Clock()
    store = BatchStore(tmp_path, max_dir_bytes=2**20, clock=clock)
    app = ExpiringApp(clock, expire_at=2)
    worker = BatchWorker(store, app, Wake(), max_running=1)
    record = new_batch(store, line("a") + line("b") + line("c") + line("d"))
    done = advance_to_end(worker, store, record.id)
    assert len(app.requests) == 2                      # nothing dispatched after the window
    assert done.status == "expired" and done.expired_at == int(clock.now_s)
    good = [json.loads(r) for r in store.file_path(done.output_file_id).read_bytes().splitlines()]
    assert [r["custom_id"] for r in good] == ["a", "b"]
    bad = [json.loads(r) for r in store.file_path(done.error_file_id).read_bytes().splitlines()]
    assert [(r["custom_id"], r["response"], r["error"]["code"]) for r in bad] == [
        ("c", None, "batch_expired"), ("d", None, "batch_expired")]
    assert (done.total, done.completed, done.failed) == (4, 2, 2)


def test_a_running_batch_found_expired_at_a_start_lists_its_rest(tmp_path):
    clock = Clock()
    store = BatchStore(tmp_path, max_dir_bytes=2**20, clock=clock)
    record = new_batch(store, line("a") + line("b"))
    store.update(record.id, lambda r: stamped(r, "in_progress", store.now(), total=2))
    clock.now_s += DAY_S                               # the server was down past the window
    app = EchoApp()
    done = advance_to_end(BatchWorker(store, app, Wake(), max_running=1), store, record.id)
    assert app.requests == [] and done.status == "expired" and done.output_file_id is None
    bad = [json.loads(r) for r in store.file_path(done.error_file_id).read_bytes().splitlines()]
    assert sorted((r["custom_id"], r["error"]["code"]) for r in bad) == [
        ("a", "batch_expired"), ("b", "batch_expired")]


def test_the_queue_depth_counts_every_waiting_and_running_batch(tmp_path):
    store = BatchStore(tmp_path, max_dir_bytes=2**20)
    worker = BatchWorker(store, EchoApp(), Wake(), max_running=1)
    running = new_batch(store, b"".join(line(c) for c in "abcde"))
    store.update(running.id, lambda r: stamped(r, "in_progress", store.now(), total=5,
                                               completed=2, failed=1))
    new_batch(store, line("x") + line("y") + line("z").rstrip(b"\n"))   # validating: 3 lines
    done = new_batch(store, line("q"))
    store.update(done.id, lambda r: stamped(r, "completed", store.now(), total=1, completed=1))
    assert worker.queued_lines() == 2 + 3               # the records' counts, nothing running
    assert store.lines_waiting({running.id: 1}) == 1 + 3   # the running batch's live count
