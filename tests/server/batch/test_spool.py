"""The upload spool (server/batch/spool.py): which bodies it claims (POST /v1/files from a
key holder), its sinks' files written by the writer thread (never the caller's), the bound
on what waits for the disk, a disk that fails, and what a start finds left there."""
from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from server.api.files import upload
from server.batch.spool import FORM_ROOM_BYTES, QUEUED_BYTES_MAX, UploadSpool
from server.door.auth import ApiKeyCheck
from server.errors import ApiError
from server.http.protocol import Request
from tests.server.batch.spool_fakes import WAIT_S, gated_writer

KEY = (("authorization", "Bearer k-1"),)


@pytest.fixture
def spools():
    made = []

    def make(folder, *, writer=None, max_file_bytes=100, key=""):
        spool = UploadSpool(folder, max_file_bytes=max_file_bytes, auth=ApiKeyCheck(key),
                            writer=writer)
        wakes = threading.Semaphore(0)
        spool.attach(wakes.release)
        made.append(spool)
        return spool, wakes

    yield make
    for spool in made:
        spool.close()


def test_only_uploads_from_key_holders_are_spooled(tmp_path, spools):
    spool, _ = spools(tmp_path, key="k-1")
    sink = spool.sink_for("POST", "/v1/files", KEY)
    assert sink is not None and sink.max_bytes == 100 + FORM_ROOM_BYTES
    assert spool.sink_for("POST", "/v1/files", ()) is None          # no key: memory, 401
    assert spool.sink_for("POST", "/v1/files", (("authorization", "Bearer no"),)) is None
    assert spool.sink_for("POST", "/v1/chat/completions", KEY) is None
    assert spool.sink_for("GET", "/v1/files", KEY) is None
    open_spool, _ = spools(tmp_path / "open")
    assert open_spool.sink_for("POST", "/v1/files", ()) is not None  # no key configured


def test_a_sinks_file_kept_or_removed_and_leftovers_cleared(tmp_path, spools):
    spool, _ = spools(tmp_path)
    kept = spool.sink_for("POST", "/v1/files", ())
    kept.write(b"ab")
    kept.write(b"cd")
    body = kept.finish()
    assert body.landing.wait() is None
    assert body.size_bytes == 4 and open(body.path, "rb").read() == b"abcd"
    empty = spool.sink_for("POST", "/v1/files", ()).finish()
    assert empty.landing.wait() is None and open(empty.path, "rb").read() == b""
    dropped = spool.sink_for("POST", "/v1/files", ())
    dropped.write(b"x")
    dropped.discard()
    spool.close()                                    # what was given lands first
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [kept.path.name, Path(empty.path).name])
    UploadSpool(tmp_path, max_file_bytes=100, auth=ApiKeyCheck(""))   # the next start
    assert list(tmp_path.iterdir()) == []


def test_writes_wait_on_the_writer_thread_and_a_full_sink_says_so(tmp_path, spools):
    gate = threading.Event()                         # the disk: stuck until set
    writer, files = gated_writer(gate)
    spool, wakes = spools(tmp_path, writer=writer, max_file_bytes=8 * QUEUED_BYTES_MAX)
    sink = spool.sink_for("POST", "/v1/files", ())
    piece = b"p" * (64 * 1024)
    num_pieces = 0
    while sink.has_room:                             # none of these calls waits for the disk
        sink.write(piece)
        num_pieces += 1
    assert num_pieces == QUEUED_BYTES_MAX // len(piece)
    assert not wakes.acquire(blocking=False)         # full, and no wake while it stays full
    body = sink.finish()
    gate.set()
    assert wakes.acquire(timeout=WAIT_S)             # room again: the loop is woken once
    assert body.landing.wait() is None and sink.has_room and sink.queued_bytes == 0
    assert open(body.path, "rb").read() == piece * num_pieces
    [file] = files
    assert file.threads == {writer._thread.ident} != {threading.get_ident()}


def test_a_failed_write_drops_the_file_and_the_handler_answers_507(tmp_path, spools):
    gate = threading.Event()
    gate.set()
    writer, files = gated_writer(gate, fail_at_write=2)
    spool, _ = spools(tmp_path, writer=writer)
    sink = spool.sink_for("POST", "/v1/files", ())
    for piece in (b"one", b"two", b"three"):
        sink.write(piece)
    body = sink.finish()
    error = body.landing.wait()
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert files[0].num_writes == 2                  # the piece after the failure was dropped
    assert list(tmp_path.iterdir()) == []            # and the file deleted
    request = Request(method="POST", path="/v1/files", spooled=body,
                      headers=(("content-type", "multipart/form-data; boundary=b"),))
    with pytest.raises(ApiError) as raised:
        upload(None, request, {}, ())                # refused before it looks at the server
    assert raised.value.kind == "storage_full" and "No space left" in raised.value.message
