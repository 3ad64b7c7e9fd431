"""The batch output file: one JSON line per answered input line, appended as each answer
comes, readable again to resume.

An output line is OpenAI's batch output line:

    {"id": "batch_req_<hex>", "custom_id": "t-1",
     "response": {"status_code": 200, "request_id": "req-<hex>", "body": {...}}, "error": null}

A refused line (`BadLine`) is answered the same way, with its 400 and the error document
as the body; one without a usable custom_id says `"custom_id": null` and its `"line"`.

Resuming: `OutputFile.open(path)` reads what an earlier run wrote, truncates a partial last
line (the process was killed mid-write: everything after the last newline goes), and
returns the keys already answered (`BatchLine.key`), so the run skips exactly those.
Each line is one `write` of whole bytes followed by a flush, so a kill at any moment leaves
complete lines and at most one partial last line; none is ever written twice, because the
lines already there are never run again.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from server.batch.lines import BadLine, BatchLine, line_key
from server.replies import json_bytes

BATCH_REQUEST_ID_BYTES = 12        # "batch_req_" + 24 hex digits


class OutputFileError(Exception):
    """The output file cannot be resumed (a complete line that is not a batch output line)."""


@dataclass(frozen=True)
class Answer:
    """One input line answered: the status and the decoded JSON body the API gave."""
    line: BatchLine
    status: int
    request_id: str
    body: object                    # the response document (a dict), or its text if not JSON
    output_tokens: int = 0          # what the answer generated (progress: tokens/s)

    def output_line(self) -> bytes:
        document = {"id": f"batch_req_{os.urandom(BATCH_REQUEST_ID_BYTES).hex()}",
                    "custom_id": self.line.custom_id,
                    "response": {"status_code": self.status, "request_id": self.request_id,
                                 "body": self.body},
                    "error": None}
        if self.line.custom_id is None:
            document["line"] = self.line.line_no
        return json_bytes(document) + b"\n"


EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."


def expired_line(line: BatchLine) -> bytes:
    """The error-file line of a line never run because its batch's window passed."""
    document = {"id": f"batch_req_{os.urandom(BATCH_REQUEST_ID_BYTES).hex()}",
                "custom_id": line.custom_id, "response": None,
                "error": {"code": "batch_expired", "message": EXPIRED_MESSAGE}}
    if line.custom_id is None:
        document["line"] = line.line_no
    return json_bytes(document) + b"\n"


def refused(line: BadLine, request_id: str) -> Answer:
    """The answer of a refused line: its 400 (the server's status for it) and document."""
    return Answer(line, line.error.status, request_id, line.error.document())


def answered_key(document: dict) -> str | None:
    """The resume key an output line records (None: not a batch output line)."""
    custom_id = document.get("custom_id")
    if isinstance(custom_id, str):
        return custom_id
    line_no = document.get("line")
    if isinstance(line_no, int):
        return line_key(line_no)
    return None


class OutputFile:
    """An output file opened for appending, its earlier complete lines read first."""

    def __init__(self, handle: BinaryIO, done_keys: set[str]):
        self._handle = handle
        self.done_keys = done_keys          # keys answered by an earlier run

    @classmethod
    def open(cls, path: str | os.PathLike) -> "OutputFile":
        path = Path(path)
        done: set[str] = set()
        if path.exists():
            done = _resume(path)
        return cls(open(path, "ab"), done)

    def write(self, answer: Answer) -> None:
        self._handle.write(answer.output_line())     # one write per line: whole or cut
        self._handle.flush()

    def write_expired(self, line: BatchLine) -> None:
        self._handle.write(expired_line(line))
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def _resume(path: Path) -> set[str]:
    """The keys of the complete lines in `path`; a partial last line is cut off."""
    data = path.read_bytes()
    complete = data[:data.rfind(b"\n") + 1]           # b"" when there is no newline at all
    if len(complete) < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(len(complete))
    done: set[str] = set()
    for number, raw in enumerate(complete.split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        try:
            document = json.loads(raw)
        except ValueError:
            document = None
        key = answered_key(document) if isinstance(document, dict) else None
        if key is None:
            raise OutputFileError(f"{path} line {number} is not a batch output line; "
                                  "give a new output file or remove that line")
        done.add(key)
    return done
