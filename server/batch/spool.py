"""Uploads written to disk as they arrive: the `BodySinks` the API listener is given
(server/http/protocol.py) when the Batch API is on.

    POST /v1/files, with the server's API key (or none configured), Content-Length framed
        -> a `FileSink`: each piece the socket brings appended to <dir>/spool/<random>,
           the body's limit `[batch] max_file_mib` (plus room for the form around the file)
    anything else -> None: the body is read into memory under the usual limit

The key is checked here, at the head, so a client without it cannot make the server write
its body to disk (it gets the usual limit, then the 401). The upload handler owns the file
once the body is whole (it copies the file part into the store and deletes the spool
file); a sink whose body never completes deletes its file. What is left in the spool
folder -- a request refused before its handler ran (loading, draining) -- is removed at
the next start.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from server.door.auth import ApiKeyCheck
from server.http.protocol import Request, SpooledBody

UPLOAD_PATH = "/v1/files"
FORM_ROOM_BYTES = 64 * 1024     # the multipart headers and fields around the file
SPOOL_NAME_BYTES = 12


class FileSink:
    """One body, appended to its spool file (opened at the first piece)."""

    def __init__(self, path: Path, max_bytes: int):
        self.path, self.max_bytes = path, max_bytes
        self._handle: BinaryIO | None = None
        self.size_bytes = 0

    def write(self, data: bytes) -> None:
        if self._handle is None:
            self._handle = open(self.path, "wb")
        self._handle.write(data)
        self.size_bytes += len(data)

    def finish(self) -> SpooledBody:
        if self._handle is None:
            self._handle = open(self.path, "wb")
        self._handle.close()
        return SpooledBody(str(self.path), self.size_bytes)

    def discard(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self.path.unlink(missing_ok=True)


class UploadSpool:
    def __init__(self, folder: str | os.PathLike, *, max_file_bytes: int, auth: ApiKeyCheck):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        for left in self.folder.iterdir():         # refused before a handler took them
            left.unlink(missing_ok=True)
        self.max_bytes = max_file_bytes + FORM_ROOM_BYTES
        self.auth = auth

    def sink_for(self, method: str, path: str,
                 headers: tuple[tuple[str, str], ...]) -> FileSink | None:
        if method != "POST" or path != UPLOAD_PATH:
            return None
        if self.auth.refusal(Request(method=method, path=path, headers=headers)) is not None:
            return None
        name = os.urandom(SPOOL_NAME_BYTES).hex()
        return FileSink(self.folder / name, self.max_bytes)
