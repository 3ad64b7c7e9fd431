"""A batch input file, line by line, as typed values: the tasks to run and the lines refused.

One input line is OpenAI's (and vLLM's) batch request:

    {"custom_id": "t-1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

`read_lines(data)` turns the whole file into `BatchLine`s in file order, each either a
`Task` (its request is for the API to answer) or a `BadLine` (what is wrong with the line,
as the `ApiError` whose 400 document the server answers for the same fault: a line that is
not a JSON object gets the body parser's own error). A body's fields are not checked here:
the API's handlers check them when the task runs, so a batch validates exactly as the live
routes do. `duplicate_ids` finds the custom_ids given twice: such a file is refused whole,
before any request, with the line numbers named (`DuplicateIds`).

Each line is keyed for resuming (`BatchLine.key`): its custom_id, or, for a line with none
usable, its line number ("line 7"), so a rerun recognises every line already answered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from server.api.fields import load_json_object
from server.errors import ApiError, bad
from server.replies import json_bytes

# The endpoints a batch line may name (OpenAI's batch endpoints that this server serves).
BATCH_URLS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
MAX_CUSTOM_ID_CHARS = 512       # OpenAI's bound on a custom_id
SHOWN_DUPLICATES = 10           # custom_ids a refusal names (then "and N more")


@dataclass(frozen=True)
class Task:
    """A line whose request the API answers: `body` is the line's body re-encoded as JSON."""
    line_no: int                # 1-based, as an editor numbers lines
    custom_id: str
    url: str
    body: bytes

    @property
    def key(self) -> str:
        return self.custom_id


@dataclass(frozen=True)
class BadLine:
    """A line refused before any request: its error is the 400 the server would answer."""
    line_no: int
    custom_id: str | None       # None when the line gives none usable
    error: ApiError

    @property
    def key(self) -> str:
        return self.custom_id if self.custom_id is not None else line_key(self.line_no)


BatchLine = Union[Task, BadLine]


def line_key(line_no: int) -> str:
    """The resume key of a line without a usable custom_id."""
    return f"line {line_no}"


class DuplicateIds(Exception):
    """custom_ids given on more than one line; the message names them and their lines."""

    def __init__(self, lines_by_id: dict[str, list[int]]):
        shown = list(lines_by_id.items())[:SHOWN_DUPLICATES]
        parts = [f"'{cid}' on lines {', '.join(map(str, nos))}" for cid, nos in shown]
        more = len(lines_by_id) - len(shown)
        tail = f" and {more} more" if more > 0 else ""
        super().__init__("duplicate custom_id: " + "; ".join(parts) + tail)
        self.lines_by_id = lines_by_id


def read_lines(data: bytes) -> list[BatchLine]:
    """Every non-blank line of a JSONL file, in order, as a `Task` or a `BadLine`."""
    out: list[BatchLine] = []
    for index, raw in enumerate(data.split(b"\n")):
        if raw.strip():
            out.append(parse_line(index + 1, raw))
    return out


def parse_line(line_no: int, raw: bytes) -> BatchLine:
    try:
        document = load_json_object(raw)
    except ApiError as err:
        return BadLine(line_no, None, err)
    custom_id = document.get("custom_id")
    usable_id = custom_id if _usable_id(custom_id) else None
    try:
        url, body = _request_of(document)
    except ApiError as err:
        return BadLine(line_no, usable_id, err)
    if usable_id is None:
        return BadLine(line_no, None, bad(
            "custom_id", f"custom_id must be a non-empty string of at most "
                         f"{MAX_CUSTOM_ID_CHARS} characters, got {custom_id!r}."))
    return Task(line_no, usable_id, url, body)


def _usable_id(custom_id) -> bool:
    return isinstance(custom_id, str) and 0 < len(custom_id) <= MAX_CUSTOM_ID_CHARS


def _request_of(document: dict) -> tuple[str, bytes]:
    """The line's url and body (JSON bytes), or the 400 naming the field that is wrong."""
    method = document.get("method", "POST")
    if method != "POST":
        raise bad("method", f"method must be \"POST\", got {method!r}.")
    url = document.get("url")
    if url not in BATCH_URLS:
        raise bad("url", f"url must be one of {', '.join(BATCH_URLS)}, got {url!r}.")
    body = document.get("body")
    if not isinstance(body, dict):
        raise bad("body", "body must be a JSON object (the request's body).")
    if body.get("stream"):
        raise bad("body.stream", "A batch request cannot stream: leave stream out or false.")
    return url, json_bytes(body)


def duplicate_ids(lines: list[BatchLine]) -> dict[str, list[int]]:
    """custom_id -> its line numbers, for every custom_id on more than one line."""
    seen: dict[str, list[int]] = {}
    for line in lines:
        if line.custom_id is not None:
            seen.setdefault(line.custom_id, []).append(line.line_no)
    return {cid: nos for cid, nos in seen.items() if len(nos) > 1}
