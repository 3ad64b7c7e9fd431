"""The multipart/form-data scanner (server/api/multipart.py), read in pieces of every size:
the text fields, where the file part lies, data that looks almost like a delimiter, a
preamble, and the 400s of a broken form."""
from __future__ import annotations

import io

import pytest

from server.api import multipart
from server.api.multipart import read_form
from server.errors import ApiError

TYPE = "multipart/form-data; boundary=XyZ"
FILE_DATA = b"line1\r\n--XyY\r\n--Xy\r\nline2\r\n-" + bytes(range(256))


def form(file_data: bytes = FILE_DATA, preamble: bytes = b"") -> bytes:
    return (preamble + b"--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
            b"batch\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
            b"filename=\"../in.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            + file_data + b"\r\n--XyZ--\r\n")


@pytest.mark.parametrize("piece_bytes", [1, 2, 5, 7, 64, 65536])
def test_fields_and_the_file_part_at_every_piece_size(monkeypatch, piece_bytes):
    monkeypatch.setattr(multipart, "READ_BYTES", piece_bytes)
    for body in (form(), form(preamble=b"ignored preamble\r\n")):
        found = read_form(io.BytesIO(body), TYPE)
        assert found.fields == {"purpose": "batch"}
        part = found.files["file"]
        assert part.filename == "../in.jsonl"            # the store makes it a name
        source = io.BytesIO(body)
        assert part.reader(source).read() == FILE_DATA
        assert part.reader(source).read(5) == FILE_DATA[:5]


def test_an_empty_file_part():
    part = read_form(io.BytesIO(form(b"")), TYPE).files["file"]
    assert part.length == 0


@pytest.mark.parametrize("body, content_type", [
    (form(), "application/json"),
    (form(), "multipart/form-data"),                      # no boundary
    (form()[:-12], TYPE),                                 # no closing delimiter
    (b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"", TYPE),   # headers unended
    (b"--XyZ garbage", TYPE),
    (b"nothing here", TYPE),
])
def test_a_broken_form_is_a_400_naming_the_file(body, content_type):
    with pytest.raises(ApiError) as refused:
        read_form(io.BytesIO(body), content_type)
    assert refused.value.status == 400 and refused.value.param == "file"


def test_a_text_field_is_bounded(monkeypatch):
    monkeypatch.setattr(multipart, "MAX_FIELD_BYTES", 10)
    body = (b"--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
            + b"b" * 11 + b"\r\n--XyZ--\r\n")
    with pytest.raises(ApiError) as refused:
        read_form(io.BytesIO(body), TYPE)
    assert refused.value.param == "purpose"
