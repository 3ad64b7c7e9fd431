"""The Batch API's files and batches on disk, as OpenAI's file and batch objects.

    <dir>/files/<file id>          the bytes of an upload or a batch's output
    <dir>/files/<file id>.json     its file object (id, bytes, created_at, filename, purpose)
    <dir>/batches/<batch id>.json  the batch object, rewritten at each change of state
    <dir>/batches/<batch id>.jsonl the output lines while it runs (resumable: output.py)

Every JSON document is written whole to a temporary file and moved over the old one
(`os.replace`), so a kill at any moment leaves the old document or the new, never half.
`BatchStore` reads the directory once at start and keeps the objects in memory. Two locks
make it safe from the loop thread, the off-loop pool and the batch worker at once: writers
take `_write_lock` for the whole change (the disk write, fsync included), and every
access to the in-memory index takes `_index_lock` only for the moment of the read or the
swap, so a reader on the loop thread never waits for a disk write.
Ids are the server's own (`file-<hex>`, `batch_<hex>`); a client's filename is kept as a
name only (its last path part), never used as a path. The directory's size is bounded
(`max_dir_bytes`): an upload that would pass it is refused.
"""
from __future__ import annotations

import io
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import BinaryIO, Callable, Mapping

from server.replies import json_bytes

ID_BYTES = 12
COPY_BYTES = 1024 * 1024        # an upload is copied into the store this much at a time
PURPOSE_BATCH = "batch"
PURPOSE_OUTPUT = "batch_output"


class StoreFull(Exception):
    """Writing this many bytes would pass the directory's quota."""


@dataclass(frozen=True)
class FileRecord:
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    lines: int = 0          # newline-separated lines (blank ones too); not in the document

    def document(self) -> dict:
        return {"id": self.id, "object": "file", "bytes": self.bytes,
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose, "status": "processed", "status_details": None}


@dataclass(frozen=True)
class BatchError:
    """One entry of a failed batch's `errors` (a line named when the fault is one line's)."""
    code: str
    message: str
    line: int | None = None
    param: str | None = None


@dataclass(frozen=True)
class BatchRecord:
    """OpenAI's batch object; `status` moves validating -> in_progress -> finalizing ->
    completed, or to failed, cancelling -> cancelled, expired (the *_at stamps: seconds)."""
    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    created_at: int
    expires_at: int
    status: str = "validating"
    metadata: dict | None = None
    errors: tuple[BatchError, ...] = ()
    output_file_id: str | None = None
    error_file_id: str | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    total: int = 0                     # request_counts
    completed: int = 0
    failed: int = 0

    @property
    def is_done(self) -> bool:
        return self.status in DONE_STATUSES

    def document(self) -> dict:
        out = {name: getattr(self, name) for name in (
            "id", "endpoint", "input_file_id", "completion_window", "status",
            "output_file_id", "error_file_id", "created_at", "in_progress_at", "expires_at",
            "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at",
            "cancelled_at", "metadata")}
        out["object"] = "batch"
        out["errors"] = ({"object": "list", "data": [asdict(e) for e in self.errors]}
                         if self.errors else None)
        out["request_counts"] = {"total": self.total, "completed": self.completed,
                                 "failed": self.failed}
        return out

    def saved(self) -> dict:
        out = asdict(self)
        out["errors"] = [asdict(e) for e in self.errors]
        return out

    @staticmethod
    def loaded(document: dict) -> "BatchRecord":
        document = dict(document)
        document["errors"] = tuple(BatchError(**e) for e in document.get("errors", []))
        return BatchRecord(**document)


STATUSES = ("validating", "in_progress", "finalizing", "completed", "failed", "cancelling",
            "cancelled", "expired")
DONE_STATUSES = ("completed", "failed", "cancelled", "expired")


def write_atomically(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all: a temporary file moved over it."""
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def copy_atomically(source: BinaryIO, path: Path) -> int:
    """`source`'s bytes at `path`, copied in pieces, whole or not at all; returns its lines
    (a last one without its newline counted too)."""
    temp = path.with_name(path.name + ".tmp")
    lines, last = 0, b"\n"
    with open(temp, "wb") as handle:
        while piece := source.read(COPY_BYTES):
            handle.write(piece)
            lines += piece.count(b"\n")
            last = piece[-1:]
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    return lines + (last != b"\n")


def safe_filename(name: str) -> str:
    """A client's filename as a name only: its last path part, no control characters."""
    last = name.replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = "".join(ch for ch in last if ch.isprintable())[:255]
    return cleaned if cleaned not in ("", ".", "..") else "upload.jsonl"


class BatchStore:
    def __init__(self, root: str | os.PathLike, *, max_dir_bytes: int,
                 clock: Callable[[], float] = time.time):
        self.root, self.max_dir_bytes, self.clock = Path(root), max_dir_bytes, clock
        self.files_dir, self.batches_dir = self.root / "files", self.root / "batches"
        for folder in (self.files_dir, self.batches_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._write_lock = threading.Lock()    # one change at a time, disk write included
        self._index_lock = threading.Lock()    # the dicts below, held for a moment only
        self._files: dict[str, FileRecord] = {}
        self._batches: dict[str, BatchRecord] = {}
        for meta in sorted(self.files_dir.glob("*.json")):
            record = FileRecord(**json.loads(meta.read_bytes()))
            self._files[record.id] = record
        for meta in sorted(self.batches_dir.glob("*.json")):
            record = BatchRecord.loaded(json.loads(meta.read_bytes()))
            self._batches[record.id] = record

    def now(self) -> int:
        return int(self.clock())

    # --- files ---------------------------------------------------------------------------

    def add_file(self, filename: str, purpose: str, data: bytes, *,
                 file_id: str | None = None) -> FileRecord:
        return self.add_file_from(filename, purpose, io.BytesIO(data), len(data),
                                  file_id=file_id)

    def add_file_from(self, filename: str, purpose: str, source: BinaryIO, size_bytes: int,
                      *, file_id: str | None = None) -> FileRecord:
        """A new file copied from `source` in pieces (an upload: a fresh id, within the
        quota), or a batch's output under the id its batch names (written again if a
        restart finalizes it twice; its bytes were counted while it ran, so the quota does
        not stop it now)."""
        is_upload = file_id is None
        file_id = file_id or f"file-{os.urandom(ID_BYTES).hex()}"
        with self._write_lock:
            if is_upload and self.used_bytes() + size_bytes > self.max_dir_bytes:
                raise StoreFull(f"{size_bytes} bytes would pass the batch directory's quota "
                                f"of {self.max_dir_bytes // 2**20} MiB")
            lines = copy_atomically(source, self.files_dir / file_id)
            record = FileRecord(file_id, size_bytes, self.now(), safe_filename(filename),
                                purpose, lines)
            write_atomically(self.files_dir / f"{file_id}.json", json_bytes(asdict(record)))
            with self._index_lock:
                self._files[file_id] = record
        return record

    def file(self, file_id: str) -> FileRecord | None:
        with self._index_lock:
            return self._files.get(file_id)

    def files(self) -> list[FileRecord]:
        with self._index_lock:
            records = list(self._files.values())
        return sorted(records, key=lambda f: (f.created_at, f.id))

    def file_path(self, file_id: str) -> Path:
        return self.files_dir / file_id

    def delete_file(self, file_id: str) -> bool:
        with self._write_lock:
            with self._index_lock:
                if self._files.pop(file_id, None) is None:
                    return False
            (self.files_dir / f"{file_id}.json").unlink(missing_ok=True)
            self.file_path(file_id).unlink(missing_ok=True)
            return True

    def used_bytes(self) -> int:
        """Every file's bytes and every running batch's output so far."""
        running = sum(p.stat().st_size for p in self.batches_dir.glob("*.jsonl"))
        return sum(f.bytes for f in self.files()) + running

    # --- batches -------------------------------------------------------------------------

    def new_batch(self, **fields_) -> BatchRecord:
        now = self.now()
        record = BatchRecord(id=f"batch_{os.urandom(ID_BYTES).hex()}", created_at=now,
                             **fields_)
        self.save(record)
        return record

    def batch(self, batch_id: str) -> BatchRecord | None:
        with self._index_lock:
            return self._batches.get(batch_id)

    def batches(self) -> list[BatchRecord]:
        """Newest first, as OpenAI lists them."""
        with self._index_lock:
            records = list(self._batches.values())
        return sorted(records, key=lambda b: (b.created_at, b.id), reverse=True)

    def save(self, record: BatchRecord) -> None:
        with self._write_lock:
            write_atomically(self.batches_dir / f"{record.id}.json", json_bytes(record.saved()))
            with self._index_lock:
                self._batches[record.id] = record

    def update(self, batch_id: str, change: Callable[[BatchRecord], BatchRecord | None]
               ) -> BatchRecord | None:
        """Apply `change` to the current record, no other change between (None from it:
        no change)."""
        with self._write_lock:
            current = self.batch(batch_id)
            if current is None:
                return None
            changed = change(current)
            if changed is None:
                return current
            write_atomically(self.batches_dir / f"{batch_id}.json", json_bytes(changed.saved()))
            with self._index_lock:
                self._batches[batch_id] = changed
            return changed

    def output_file_ids(self, batch_id: str) -> tuple[str, str]:
        """The ids of a batch's output and error files: fixed by the batch's id, so
        finalizing again after a restart replaces them instead of adding two more."""
        suffix = batch_id.removeprefix("batch_")
        return f"file-{suffix}-output", f"file-{suffix}-errors"

    def output_path(self, batch_id: str) -> Path:
        return self.batches_dir / f"{batch_id}.jsonl"

    def lines_waiting(self, live: Mapping[str, int]) -> int:
        """The lines not yet answered of every batch validating or in progress: `live`'s
        count for a batch it names (the one running), else what its record says (its input
        file's lines while it is validating; total less the answered ones after)."""
        with self._index_lock:
            waiting = [b for b in self._batches.values()
                       if b.status in ("validating", "in_progress")]
            files = dict(self._files)
        out = 0
        for batch in waiting:
            if batch.id in live:
                out += live[batch.id]
            elif batch.status == "validating":
                source = files.get(batch.input_file_id)
                out += source.lines if source is not None else 0
            else:
                out += max(0, batch.total - batch.completed - batch.failed)
        return out

    def counts_by_status(self) -> dict[str, int]:
        with self._index_lock:
            statuses = [record.status for record in self._batches.values()]
        out = dict.fromkeys(STATUSES, 0)
        for status in statuses:
            out[status] += 1
        return out


def stamped(record: BatchRecord, status: str, now: int, **more) -> BatchRecord:
    """`record` moved to `status`, its `<status>_at` stamp set (when it has one)."""
    stamp = f"{status}_at"
    extra = {stamp: now} if stamp in BatchRecord.__dataclass_fields__ else {}
    return replace(record, status=status, **extra, **more)
