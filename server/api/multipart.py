"""A multipart/form-data body read from a file in pieces: where each field is, never the
whole body in memory.

`read_form(source, content_type)` scans the body once (`READ_BYTES` at a time, keeping
only a delimiter's length between pieces) and returns a `Form`: the small text fields by
name (each at most `MAX_FIELD_BYTES`) and, for the file fields, where their bytes lie in
the source (`FilePart`: offset, length, the client's filename), so the caller copies the
file out with `FilePart.reader` without ever holding it. A body that breaks the grammar
(no boundary, a part without its headers' end, no closing delimiter) is a 400 naming
the form.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from email.policy import HTTP
from typing import BinaryIO

from server.errors import ApiError, bad

READ_BYTES = 64 * 1024
MAX_FIELD_BYTES = 64 * 1024       # a text field (purpose); a file field has no such bound
MAX_PART_HEAD_BYTES = 16 * 1024
_BOUNDARY = re.compile(r'boundary="?([^";]{1,200})"?', re.IGNORECASE)


@dataclass(frozen=True)
class FilePart:
    offset: int                  # where its bytes start in the source
    length: int
    filename: str                # as the client sent it (a name for show, never a path)

    def reader(self, source: BinaryIO) -> "PartReader":
        return PartReader(source, self)


@dataclass
class Form:
    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, FilePart] = field(default_factory=dict)


class PartReader:
    """A file-like `read(n)` over one part's bytes of the source."""

    def __init__(self, source: BinaryIO, part: FilePart):
        self.source, self.left_bytes = source, part.length
        source.seek(part.offset)

    def read(self, n: int = -1) -> bytes:
        n = self.left_bytes if n < 0 else min(n, self.left_bytes)
        data = self.source.read(n)
        self.left_bytes -= len(data)
        return data


def boundary_of(content_type: str) -> bytes:
    if not content_type.lower().startswith("multipart/form-data"):
        raise bad("file", "Upload the file as multipart/form-data (fields purpose and file).")
    match = _BOUNDARY.search(content_type)
    if match is None:
        raise bad("file", "The multipart/form-data content type names no boundary.")
    return match.group(1).encode("latin-1")


class _Scanner:
    """The source read forward in pieces; `buf` holds what is read and not yet consumed,
    starting at `offset` in the source."""

    def __init__(self, source: BinaryIO):
        self.source, self.buf, self.offset, self.eof = source, bytearray(), 0, False

    def fill(self) -> None:
        piece = self.source.read(READ_BYTES)
        if piece:
            self.buf += piece
        else:
            self.eof = True

    def consume(self, n: int) -> bytes:
        taken = bytes(self.buf[:n])
        del self.buf[:n]
        self.offset += n
        return taken


def read_form(source: BinaryIO, content_type: str) -> Form:
    boundary = boundary_of(content_type)
    scan, form = _Scanner(source), Form()
    first, delimiter = b"--" + boundary, b"\r\n--" + boundary
    while len(scan.buf) < len(first) and not scan.eof:
        scan.fill()
    if not scan.buf.startswith(first):          # a preamble: skip to the first delimiter
        _skip_to(scan, delimiter)
    else:
        scan.consume(len(first))
    while True:
        while len(scan.buf) < 2 and not scan.eof:
            scan.fill()
        if scan.buf[:2] == b"--":
            return form
        if scan.buf[:2] != b"\r\n":
            raise _broken("a delimiter not followed by CRLF")
        scan.consume(2)
        name, filename = _part_head(scan)
        start = scan.offset
        text = bytearray()
        is_file = filename is not None
        while (at := scan.buf.find(delimiter)) < 0:
            if scan.eof:
                raise _broken("no closing delimiter")
            safe = len(scan.buf) - len(delimiter) + 1
            if safe > 0:
                piece = scan.consume(safe)
                if not is_file:
                    _keep(text, piece, name)
            scan.fill()
        end = scan.offset + at
        piece = scan.consume(at)
        scan.consume(len(delimiter))
        if name is None:
            continue
        if is_file:
            form.files.setdefault(name, FilePart(start, end - start, filename))
        else:
            _keep(text, piece, name)
            form.fields.setdefault(name, bytes(text).decode("utf-8", "replace"))


def _keep(text: bytearray, piece: bytes, name: str | None) -> None:
    """A text field's piece kept, within its bound."""
    text += piece
    if len(text) > MAX_FIELD_BYTES:
        raise bad(name or "form", f"The form field {name!r} is over {MAX_FIELD_BYTES} bytes.")


def _skip_to(scan: _Scanner, delimiter: bytes) -> None:
    while (at := scan.buf.find(delimiter)) < 0:
        if scan.eof:
            raise _broken("no delimiter")
        scan.consume(max(0, len(scan.buf) - len(delimiter) + 1))
        scan.fill()
    scan.consume(at + len(delimiter))


def _part_head(scan: _Scanner) -> tuple[str | None, str | None]:
    """A part's headers: its field name and, for a file field, the filename ("" allowed)."""
    while (end := scan.buf.find(b"\r\n\r\n")) < 0:
        if scan.eof or len(scan.buf) > MAX_PART_HEAD_BYTES:
            raise _broken("a part's headers do not end")
        scan.fill()
    headers = BytesHeaderParser(policy=HTTP).parsebytes(scan.consume(end + 4))
    name = headers.get_param("name", header="content-disposition")
    filename = headers.get_param("filename", header="content-disposition")
    return (name if isinstance(name, str) else None,
            filename if isinstance(filename, str) else None)


def _broken(what: str) -> ApiError:
    return bad("file", f"The multipart/form-data body is malformed: {what}.")
