"""The batch output file (server/batch/output.py): OpenAI's output line, and resuming: the
keys of the complete lines, a partial last line cut off, a foreign line refused."""
from __future__ import annotations

import json

import pytest

from server.batch.lines import BadLine, Task, line_key
from server.batch.output import Answer, OutputFile, OutputFileError, refused
from server.errors import bad


def task(custom_id: str, line_no: int = 1) -> Task:
    return Task(line_no, custom_id, "/v1/completions", b"{}")


def test_an_output_line_has_openais_fields():
    document = json.loads(Answer(task("a"), 200, "req-1", {"x": 1}).output_line())
    assert document["id"].startswith("batch_req_")
    assert document["custom_id"] == "a" and document["error"] is None
    assert document["response"] == {"status_code": 200, "request_id": "req-1", "body": {"x": 1}}
    assert "line" not in document


def test_a_refused_line_without_an_id_records_its_number():
    err = bad("url", "no such url")
    document = json.loads(refused(BadLine(4, None, err), "req-2").output_line())
    assert document["custom_id"] is None and document["line"] == 4
    assert document["response"]["status_code"] == 400
    assert document["response"]["body"] == err.document()


def test_resume_reads_the_keys_and_cuts_a_partial_last_line(tmp_path):
    path = tmp_path / "out.jsonl"
    first = OutputFile.open(path)
    assert first.done_keys == set()
    first.write(Answer(task("a"), 200, "r", {}))
    first.write(refused(BadLine(2, None, bad("url", "x")), "r"))
    first.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"id":"batch_req_x","custom_id":"b","resp')   # killed mid-write
    second = OutputFile.open(path)
    assert second.done_keys == {"a", line_key(2)}
    assert path.read_bytes() == whole
    second.write(Answer(task("b"), 200, "r", {}))
    second.close()
    assert [json.loads(x)["custom_id"] for x in path.read_bytes().splitlines()] == ["a", None, "b"]


def test_a_file_with_no_newline_at_all_is_one_partial_line(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"id":"batch_req_x","cus')
    assert OutputFile.open(path).done_keys == set()
    assert path.read_bytes() == b""


def test_a_complete_line_that_is_no_output_line_is_refused(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"hello": 1}\n')
    with pytest.raises(OutputFileError, match="line 1"):
        OutputFile.open(path)
