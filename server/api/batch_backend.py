"""What the /v1/files and /v1/batches handlers need from the Batch API's store and worker,
as a protocol: the API room parses the HTTP request and answers the documents; where the
bytes live and who runs the batches is server/batch/'s (`StoredBatches`), handed in by
serve.py. Each method returns OpenAI's documents (file and batch objects as dicts) and
raises an `ApiError` for what the client got wrong (an unknown id, a bad field, a full
directory)."""
from __future__ import annotations

from typing import BinaryIO, Protocol


class BatchBackend(Protocol):
    max_file_bytes: int                       # the largest upload ([batch].max_file_mib)

    def upload(self, filename: str, purpose: str, source: BinaryIO,
               size_bytes: int) -> dict: ...   # the file's bytes, read from `source`

    def files(self) -> list[dict]: ...       # oldest first

    def file(self, file_id: str) -> dict: ...

    def file_content(self, file_id: str) -> bytes: ...

    def delete_file(self, file_id: str) -> dict: ...

    def create(self, input_file_id: object, endpoint: object, completion_window: object,
               metadata: object) -> dict: ...

    def batches(self) -> list[dict]: ...     # newest first

    def batch(self, batch_id: str) -> dict: ...

    def cancel(self, batch_id: str) -> dict: ...
