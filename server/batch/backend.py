"""The Batch API's operations over the store and the worker (`StoredBatches`): what the
handlers of server/api/files.py and batches.py call through their `BatchBackend`
protocol, answering OpenAI's documents and raising the client's errors.

Creating a batch checks its fields (an uploaded file of purpose "batch", one of the
endpoints a batch line may name, the 24h window, OpenAI's bounds on metadata), stores it
`validating` and tells the worker. Cancelling marks a running batch `cancelling` and tells
the worker, which stops submitting, lets what is in flight finish, and ends it
`cancelled` with what was answered so far in its output and error files; a batch already
at its end cannot be cancelled (409).
"""
from __future__ import annotations

from typing import BinaryIO

from server.batch.lines import BATCH_URLS
from server.batch.store import PURPOSE_BATCH, BatchRecord, BatchStore, StoreFull, stamped
from server.batch.worker import BatchWorker
from server.errors import ApiError, bad

COMPLETION_WINDOWS_S = {"24h": 24 * 3600}     # OpenAI's one window
MAX_METADATA_PAIRS, MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS = 16, 64, 512
CANCELLABLE = ("validating", "in_progress", "cancelling", "cancelled")


class StoredBatches:
    def __init__(self, store: BatchStore, worker: BatchWorker, *, max_file_bytes: int):
        self.store, self.worker, self.max_file_bytes = store, worker, max_file_bytes

    # --- files ---------------------------------------------------------------------------

    def upload(self, filename: str, purpose: str, source: BinaryIO, size_bytes: int) -> dict:
        if purpose != PURPOSE_BATCH:
            raise bad("purpose", f'purpose must be "batch", got {purpose!r}.')
        try:
            return self.store.add_file_from(filename, purpose, source, size_bytes).document()
        except StoreFull as exc:
            raise ApiError("storage_full", f"{exc}; delete files to make room.") from None

    def files(self) -> list[dict]:
        return [record.document() for record in self.store.files()]

    def file(self, file_id: str) -> dict:
        record = self.store.file(file_id)
        if record is None:
            raise _no_file(file_id)
        return record.document()

    def file_content(self, file_id: str) -> bytes:
        self.file(file_id)
        try:
            return self.store.file_path(file_id).read_bytes()
        except FileNotFoundError:
            raise _no_file(file_id) from None

    def delete_file(self, file_id: str) -> dict:
        if not self.store.delete_file(file_id):
            raise _no_file(file_id)
        return {"id": file_id, "object": "file", "deleted": True}

    # --- batches -------------------------------------------------------------------------

    def create(self, input_file_id: object, endpoint: object, completion_window: object,
               metadata: object) -> dict:
        if not isinstance(input_file_id, str):
            raise bad("input_file_id", "input_file_id must be the id of an uploaded file.")
        source = self.store.file(input_file_id)
        if source is None:
            raise _no_file(input_file_id, param="input_file_id")
        if source.purpose != PURPOSE_BATCH:
            raise bad("input_file_id", f"The file {input_file_id} was not uploaded with "
                                       'purpose "batch".')
        if endpoint not in BATCH_URLS:
            raise bad("endpoint", f"endpoint must be one of {', '.join(BATCH_URLS)}, "
                                  f"got {endpoint!r}.")
        if completion_window not in COMPLETION_WINDOWS_S:
            raise bad("completion_window",
                      f'completion_window must be "24h", got {completion_window!r}.')
        record = self.store.new_batch(
            endpoint=endpoint, input_file_id=input_file_id,
            completion_window=completion_window, metadata=_metadata(metadata),
            expires_at=self.store.now() + COMPLETION_WINDOWS_S[completion_window])
        self.worker.notify()
        return record.document()

    def batches(self) -> list[dict]:
        return [record.document() for record in self.store.batches()]

    def batch(self, batch_id: str) -> dict:
        return self._record(batch_id).document()

    def cancel(self, batch_id: str) -> dict:
        record = self._record(batch_id)
        if record.status not in CANCELLABLE:
            raise ApiError("batch_not_cancellable", f"The batch {record.id} is "
                           f"{record.status}; only a batch still running can be cancelled.")

        def cancelling(current: BatchRecord) -> BatchRecord | None:
            if current.status not in ("validating", "in_progress"):
                return None                   # already cancelling, or it just ended
            return stamped(current, "cancelling", self.store.now())

        record = self.store.update(batch_id, cancelling) or record
        self.worker.cancel(batch_id)
        return record.document()

    def _record(self, batch_id: str) -> BatchRecord:
        record = self.store.batch(batch_id)
        if record is None:
            raise ApiError("batch_not_found", f"No such batch: {batch_id!r}.",
                           param="batch_id")
        return record


def _no_file(file_id: str, param: str = "file_id") -> ApiError:
    return ApiError("file_not_found", f"No such file: {file_id!r}.", param=param)


def _metadata(value: object) -> dict | None:
    """OpenAI's metadata: at most 16 string pairs, keys <= 64 and values <= 512 chars."""
    if value is None:
        return None
    if (not isinstance(value, dict) or len(value) > MAX_METADATA_PAIRS
            or not all(isinstance(k, str) and isinstance(v, str)
                       and len(k) <= MAX_METADATA_KEY_CHARS
                       and len(v) <= MAX_METADATA_VALUE_CHARS for k, v in value.items())):
        raise bad("metadata", f"metadata must be an object of at most {MAX_METADATA_PAIRS} "
                              f"string pairs (keys up to {MAX_METADATA_KEY_CHARS} characters, "
                              f"values up to {MAX_METADATA_VALUE_CHARS}).")
    return dict(value)
