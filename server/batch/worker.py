"""The server's batch worker: one thread that runs the stored batches, oldest first, to
their end, through an API application of its own.

    validating   the input file read (lines.py); a duplicate custom_id -> failed, the
                 errors naming the lines; else request_counts.total set -> in_progress
    in_progress  the output lines appended as answers come (output.py: a restart resumes
                 by custom_id, so none is answered twice and none lost); the refused lines
                 answered at once; the tasks through a `BatchRunner` (runner.py), at most
                 `max_running` in flight; counts saved at most every `SAVE_EVERY_S`
    finalizing   the 2xx lines -> the output file, the others -> the error file
    completed    (or cancelled, after a cancel stopped the runner; or expired: once
                 expires_at passes, validating or running, no line is submitted any more,
                 those in flight finish, and every line not answered gets a
                 `batch_expired` error line, so both files hold the whole input)

Threads: the worker's own thread is the only one that touches its streams, and its
`ApiApp` has a `ServerState` of its own, so the streams' metric callbacks update counters
no other thread writes (the loop's `ServerMetrics` has no lock and is never touched from
here). The engine and the off-loop pool wake this thread through `wake` (the server
fans each wake out to the loop and to it). Every generation it starts runs at
`BATCH_PRIORITY`, below any priority a client may ask for, so batches yield to people.
`stop()` (the server's drain) stops submitting; what is in flight is finished and
checkpointed, and the batch stays in_progress for the next start to resume.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import replace
from typing import Callable

from server.api.generation import MAX_PRIORITY
from server.batch.lines import BadLine, Task, duplicate_ids, read_lines
from server.batch.output import Answer, OutputFile, refused
from server.batch.runner import BatchRunner, Wake
from server.batch.store import (PURPOSE_OUTPUT, BatchError, BatchRecord, BatchStore,
                                stamped)
from server.door.request_id import MINTED_ID_BYTES
from server.http.protocol import App

log = logging.getLogger("tlserve.batch")
BATCH_PRIORITY = -MAX_PRIORITY - 1      # below every X-TL-Priority a request may give
SAVE_EVERY_S = 1.0                      # the counts' checkpoint, at most this often
IDLE_WAIT_S = 5.0                       # a worker with nothing to do looks again this often
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")


class BatchStats:
    """The worker's counters, read by /metrics from the loop thread (hence the lock)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.done = self.failed = self.queued = 0

    def answered(self, ok: bool) -> None:
        with self._lock:
            self.done += 1
            if not ok:
                self.failed += 1
            self.queued = max(0, self.queued - 1)

    def set_queued(self, lines: int) -> None:
        with self._lock:
            self.queued = lines

    def read(self) -> tuple[int, int, int]:
        with self._lock:
            return self.done, self.failed, self.queued


class BatchWorker:
    def __init__(self, store: BatchStore, app: App, wake: Wake, *, max_running: int,
                 clock: Callable[[], float] = time.monotonic):
        self.store, self.app, self.wake, self.clock = store, app, wake, clock
        self.max_running = max_running
        self.stats = BatchStats()
        self._work = threading.Event()          # a batch was created or cancelled
        self._stopping = False
        self._lock = threading.Lock()
        self._runner: BatchRunner | None = None
        self._running_id: str | None = None
        self._thread = threading.Thread(target=self._serve, name="tl-batch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def notify(self) -> None:
        """A batch was created: look for work (thread-safe)."""
        self._work.set()

    def cancel(self, batch_id: str) -> None:
        """The batch was marked cancelling: stop its runner if it is the one running."""
        with self._lock:
            if self._running_id == batch_id and self._runner is not None:
                self._runner.stop()
        self._work.set()

    def queued_lines(self) -> int:
        """The lines not yet answered of every batch waiting or running (thread-safe)."""
        with self._lock:
            running_id = self._running_id
        live = {running_id: self.stats.read()[2]} if running_id is not None else {}
        return self.store.lines_waiting(live)

    def stop(self, join_s: float) -> None:
        """Submit nothing more, finish what is in flight (checkpointed), and end the thread."""
        with self._lock:
            self._stopping = True
            if self._runner is not None:
                self._runner.stop()
        self._work.set()
        if self._thread.is_alive():           # never started: a start-up that failed
            self._thread.join(join_s)

    # --- the thread ----------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stopping:
            self._work.clear()
            record = self._next()
            if record is None:
                self._work.wait(IDLE_WAIT_S)
                continue
            try:
                self._advance(record)
            except Exception:                                  # noqa: BLE001
                log.exception("batch %s failed", record.id)
                self.store.update(record.id, lambda r: stamped(r, "failed", self.store.now(),
                                  errors=(BatchError("internal_error", "The server failed "
                                                     "while running this batch."),)))

    def _next(self) -> BatchRecord | None:
        active = [b for b in self.store.batches() if b.status in ACTIVE]
        return min(active, key=lambda b: (b.created_at, b.id)) if active else None

    def _advance(self, record: BatchRecord) -> None:
        """One step of the batch's life, from the status it is in."""
        now = self.store.now()
        if record.status == "cancelling":
            self._finalize(record, "cancelled")
        elif record.status == "in_progress" and now >= record.expires_at:
            self._expire(record)
        elif record.status == "validating" and now >= record.expires_at:
            self._finalize(record, "expired")
        elif record.status == "validating":
            self._validate(record)
        elif record.status == "in_progress":
            self._run(record)
        elif record.status == "finalizing":
            self._finalize(record, "completed")

    def _lines(self, record: BatchRecord):
        return read_lines(self.store.file_path(record.input_file_id).read_bytes())

    def _validate(self, record: BatchRecord) -> None:
        try:
            lines = self._lines(record)
        except OSError:
            self._fail(record, (BatchError("file_not_found", "The input file "
                                           f"{record.input_file_id} cannot be read."),))
            return
        duplicates = duplicate_ids(lines)
        if duplicates:
            self._fail(record, tuple(
                BatchError("duplicate_custom_id", f"custom_id '{cid}' is given on lines "
                           f"{', '.join(map(str, nos))}", line=nos[-1], param="custom_id")
                for cid, nos in duplicates.items()))
            return
        wrong = [line for line in lines
                 if isinstance(line, Task) and line.url != record.endpoint]
        if wrong:
            self._fail(record, tuple(
                BatchError("mismatched_endpoint", f"url {line.url} is not the batch's "
                           f"endpoint {record.endpoint}", line=line.line_no, param="url")
                for line in wrong))
            return
        self.store.update(record.id, lambda r: None if r.status != "validating" else
                          stamped(r, "in_progress", self.store.now(), total=len(lines)))

    def _fail(self, record: BatchRecord, errors: tuple[BatchError, ...]) -> None:
        self.store.update(record.id, lambda r: stamped(r, "failed", self.store.now(),
                                                       errors=errors))

    def _run(self, record: BatchRecord) -> None:
        lines = self._lines(record)
        output = OutputFile.open(self.store.output_path(record.id))
        counts = _Counts(self, record.id, output)
        runner = BatchRunner(self.app, self.wake, max_in_flight=self.max_running,
                             clock=self.clock)
        try:
            todo = [line for line in lines if line.key not in output.done_keys]
            self.stats.set_queued(len(todo))
            for line in todo:
                if isinstance(line, BadLine):
                    counts.add(refused(line, f"req-{os.urandom(MINTED_ID_BYTES).hex()}"))
            with self._lock:       # a cancel or a stop from now on reaches this runner
                current = self.store.batch(record.id)
                if self._stopping or current is None or current.status != "in_progress":
                    return
                self._runner, self._running_id = runner, record.id
            left = runner.run([line for line in todo if isinstance(line, Task)], counts.add,
                              is_expired=lambda: self.store.now() >= record.expires_at)
        finally:
            with self._lock:
                self._runner = self._running_id = None
            output.close()
            counts.save()
        if left and self.store.now() >= record.expires_at:
            self._expire(self.store.batch(record.id) or record)
        elif left == 0:
            self.store.update(record.id, lambda r: None if r.status != "in_progress" else
                              stamped(r, "finalizing", self.store.now()))

    def _expire(self, record: BatchRecord) -> None:
        """Past its window: every line not answered gets its `batch_expired` error line,
        then the batch ends `expired` with both files (a cancel already asked wins)."""
        if record.status != "in_progress":
            return
        output = OutputFile.open(self.store.output_path(record.id))
        try:
            for line in self._lines(record):
                if line.key not in output.done_keys:
                    output.write_expired(line)
        finally:
            output.close()
        self._finalize(record, "expired")

    def _finalize(self, record: BatchRecord, status: str) -> None:
        """The output lines split into the output file (2xx) and the error file; `status`."""
        path = self.store.output_path(record.id)
        good: list[bytes] = []
        bad: list[bytes] = []
        if path.exists():
            OutputFile.open(path).close()           # a partial last line cut off
            for raw in path.read_bytes().splitlines(keepends=True):
                (good if _ok(raw) else bad).append(raw)
        output_id, error_id = self.store.output_file_ids(record.id)
        if good:
            self.store.add_file(f"{record.id}_output.jsonl", PURPOSE_OUTPUT, b"".join(good),
                                file_id=output_id)
        if bad:
            self.store.add_file(f"{record.id}_error.jsonl", PURPOSE_OUTPUT, b"".join(bad),
                                file_id=error_id)
        self.store.update(record.id, lambda r: stamped(
            r, status, self.store.now(), output_file_id=output_id if good else None,
            error_file_id=error_id if bad else None,
            completed=len(good), failed=len(bad)))
        path.unlink(missing_ok=True)


class _Counts:
    """The answers of a running batch: written, counted, checkpointed now and then."""

    def __init__(self, worker: BatchWorker, batch_id: str, output: OutputFile):
        self.worker, self.batch_id, self.output = worker, batch_id, output
        self.completed = self.failed = 0
        path = worker.store.output_path(batch_id)
        for raw in path.read_bytes().splitlines() if path.exists() else ():
            if _ok(raw):
                self.completed += 1
            else:
                self.failed += 1
        self._saved_s = worker.clock()

    def add(self, answer: Answer) -> None:
        self.output.write(answer)
        ok = 200 <= answer.status < 300
        self.completed += ok
        self.failed += not ok
        self.worker.stats.answered(ok)
        if self.worker.clock() - self._saved_s >= SAVE_EVERY_S:
            self.save()

    def save(self) -> None:
        self._saved_s = self.worker.clock()
        self.worker.store.update(self.batch_id, lambda r: replace(
            r, completed=self.completed, failed=self.failed))


def _ok(raw: bytes) -> bool:
    """An output line whose response status is 2xx (a line that is not one: an error)."""
    try:
        status = json.loads(raw)["response"]["status_code"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(status, int) and 200 <= status < 300


