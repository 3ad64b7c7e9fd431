"""Uploads written to disk as they arrive: the `BodySinks` the API listener is given
(server/http/protocol.py) when the Batch API is on.

    POST /v1/files, with the server's API key (or none configured), Content-Length framed
        -> a `FileSink`: each piece the socket brings handed to the spool's one writer
           thread, which appends it to <dir>/spool/<random>; the body's limit
           `[batch] max_file_mib` (plus room for the form around the file)
    anything else -> None: the body is read into memory under the usual limit

The loop thread never touches the disk: `write` only queues the piece. A disk slower than
the client fills the sink's queue to `QUEUED_BYTES_MAX`; the sink then says it has no room,
the loop stops reading that connection (TCP's window holds the client back), and the
writer wakes the loop once the queue is under the bound again. So an upload in flight costs
at most the bound plus one recv of memory, whatever its size.

A write that fails (the disk full) deletes the file and drops the pieces still to come; the
body's `Landing` carries the error to the upload handler, which answers 507. The key is
checked here, at the head, so a client without it cannot make the server write its body to
disk (it gets the usual limit, then the 401). The upload handler owns the file once it has
landed (it copies the file part into the store and deletes the spool file); a sink whose
body never completes deletes its file. What is left in the spool folder -- a request
refused before its handler ran (loading, draining) -- is removed at the next start.
"""
from __future__ import annotations

import collections
import enum
import os
import threading
from pathlib import Path
from typing import BinaryIO, Callable

from server.door.auth import ApiKeyCheck
from server.http.protocol import Landing, Request, SpooledBody

UPLOAD_PATH = "/v1/files"
FORM_ROOM_BYTES = 64 * 1024     # the multipart headers and fields around the file
SPOOL_NAME_BYTES = 12
QUEUED_BYTES_MAX = 1 << 20      # per upload: pieces waiting for the disk before reading stops
STOP_JOIN_S = 10.0              # how long `stop` waits for what was given to land


def open_for_write(path: Path) -> BinaryIO:
    return open(path, "wb")


class Mark(enum.Enum):
    """What the writer does after a sink's pieces, besides appending one."""
    FINISH = "finish"           # close the file; the body has landed
    DISCARD = "discard"         # close and delete the file; the body never will be whole


class FileSink:
    """One body. The loop thread calls write / finish / discard; the writer thread owns
    the file handle and `error`; `queued_bytes` is shared, under the writer's lock."""

    def __init__(self, path: Path, max_bytes: int, writer: "SpoolWriter"):
        self.path, self.max_bytes = path, max_bytes
        self._writer = writer
        self.size_bytes = 0                    # given so far
        self.queued_bytes = 0                  # given, not yet written
        self.landing = Landing()
        self.handle: BinaryIO | None = None    # opened by the writer at the first piece
        self.error: OSError | None = None      # the write that failed; later pieces dropped

    @property
    def has_room(self) -> bool:
        return self.queued_bytes < QUEUED_BYTES_MAX

    def write(self, data: bytes) -> None:
        self.size_bytes += len(data)
        self._writer.put(self, data)

    def finish(self) -> SpooledBody:
        self._writer.put(self, Mark.FINISH)
        return SpooledBody(str(self.path), self.size_bytes, self.landing)

    def discard(self) -> None:
        self._writer.put(self, Mark.DISCARD)


class SpoolWriter:
    """The one thread that writes every upload's pieces, in the order they were given.
    `open_file` makes a sink's file (tests hand in one that blocks or fails)."""

    def __init__(self, open_file: Callable[[Path], BinaryIO] = open_for_write):
        self._open_file = open_file
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._queue: collections.deque[tuple[FileSink, bytes | Mark]] = collections.deque()
        self._wake: Callable[[], None] = lambda: None

    def start(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._thread = threading.Thread(target=self._run, name="tlserve-spool", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what was given, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(STOP_JOIN_S)

    def put(self, sink: FileSink, item: bytes | Mark) -> None:
        with self._cond:
            if isinstance(item, bytes):
                sink.queued_bytes += len(item)
            self._queue.append((sink, item))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return                       # stopping, and everything given is written
                sink, item = self._queue.popleft()
            self._apply(sink, item)
            if isinstance(item, bytes):
                with self._cond:
                    was_full = not sink.has_room
                    sink.queued_bytes -= len(item)
                    has_room_again = was_full and sink.has_room
                if has_room_again:
                    self._wake()                 # the loop reads that upload again

    def _apply(self, sink: FileSink, item: bytes | Mark) -> None:
        if item is Mark.DISCARD:
            self._drop(sink)
            return
        if sink.error is None:
            try:
                if sink.handle is None:
                    sink.handle = self._open_file(sink.path)
                if item is Mark.FINISH:
                    sink.handle.close()
                else:
                    sink.handle.write(item)
            except OSError as exc:
                sink.error = exc
                self._drop(sink)
        if item is Mark.FINISH:
            sink.landing.set(sink.error)

    @staticmethod
    def _drop(sink: FileSink) -> None:
        """Close and delete the sink's file: it will never be read."""
        if sink.handle is not None:
            try:
                sink.handle.close()
            except OSError:
                pass                             # what failed is reported by the write's error
            sink.handle = None
        sink.path.unlink(missing_ok=True)


class UploadSpool:
    def __init__(self, folder: str | os.PathLike, *, max_file_bytes: int, auth: ApiKeyCheck,
                 writer: SpoolWriter | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        for left in self.folder.iterdir():         # refused before a handler took them
            left.unlink(missing_ok=True)
        self.max_bytes = max_file_bytes + FORM_ROOM_BYTES
        self.auth = auth
        self.writer = writer or SpoolWriter()

    def attach(self, wake: Callable[[], None]) -> None:
        self.writer.start(wake)

    def close(self) -> None:
        self.writer.stop()

    def sink_for(self, method: str, path: str,
                 headers: tuple[tuple[str, str], ...]) -> FileSink | None:
        if method != "POST" or path != UPLOAD_PATH:
            return None
        if self.auth.refusal(Request(method=method, path=path, headers=headers)) is not None:
            return None
        name = os.urandom(SPOOL_NAME_BYTES).hex()
        return FileSink(self.folder / name, self.max_bytes, self.writer)
