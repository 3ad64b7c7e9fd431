"""The upload spool (server/batch/spool.py): which bodies it claims (POST /v1/files from a
key holder), its sinks' files, and what a start finds left there."""
from __future__ import annotations

from server.batch.spool import FORM_ROOM_BYTES, UploadSpool
from server.door.auth import ApiKeyCheck

KEY = (("authorization", "Bearer k-1"),)


def test_only_uploads_from_key_holders_are_spooled(tmp_path):
    spool = UploadSpool(tmp_path, max_file_bytes=100, auth=ApiKeyCheck("k-1"))
    sink = spool.sink_for("POST", "/v1/files", KEY)
    assert sink is not None and sink.max_bytes == 100 + FORM_ROOM_BYTES
    assert spool.sink_for("POST", "/v1/files", ()) is None          # no key: memory, 401
    assert spool.sink_for("POST", "/v1/files", (("authorization", "Bearer no"),)) is None
    assert spool.sink_for("POST", "/v1/chat/completions", KEY) is None
    assert spool.sink_for("GET", "/v1/files", KEY) is None
    open_spool = UploadSpool(tmp_path / "open", max_file_bytes=1, auth=ApiKeyCheck(""))
    assert open_spool.sink_for("POST", "/v1/files", ()) is not None  # no key configured


def test_a_sinks_file_kept_or_removed_and_leftovers_cleared(tmp_path):
    spool = UploadSpool(tmp_path, max_file_bytes=100, auth=ApiKeyCheck(""))
    kept = spool.sink_for("POST", "/v1/files", ())
    kept.write(b"ab")
    kept.write(b"cd")
    body = kept.finish()
    assert body.size_bytes == 4 and open(body.path, "rb").read() == b"abcd"
    dropped = spool.sink_for("POST", "/v1/files", ())
    dropped.write(b"x")
    dropped.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.path.name]
    UploadSpool(tmp_path, max_file_bytes=100, auth=ApiKeyCheck(""))   # the next start
    assert list(tmp_path.iterdir()) == []
