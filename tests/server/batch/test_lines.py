"""Batch input lines as tasks or refusals (server/batch/lines.py): every kind of bad line
gets the 400 the server answers for it, duplicate custom_ids are named with their lines."""
from __future__ import annotations

import json

import pytest

from server.batch.lines import (BadLine, DuplicateIds, Task, duplicate_ids, line_key,
                                read_lines)


def line(**fields) -> bytes:
    base = {"custom_id": "t", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...}).encode()


def test_a_good_line_is_a_task_with_its_body_as_json():
    (task,) = read_lines(line(custom_id="a") + b"\n")
    assert isinstance(task, Task)
    assert (task.line_no, task.custom_id, task.url, task.key) == (1, "a", "/v1/chat/completions", "a")
    assert json.loads(task.body)["messages"][0]["content"] == "hi"


def test_blank_lines_are_skipped_and_numbers_stay_the_editors():
    lines = read_lines(b"\n" + line(custom_id="a") + b"\n  \n" + line(custom_id="b"))
    assert [(x.line_no, x.custom_id) for x in lines] == [(2, "a"), (4, "b")]


@pytest.mark.parametrize("raw, param, code", [
    (b"not json", None, "invalid_json"),
    (b"[1, 2]", None, "invalid_json"),
    (line(method="GET"), "method", None),
    (line(url="/v1/nope"), "url", None),
    (line(url=...), "url", None),
    (line(body=[1]), "body", None),
    (line(body={"model": "m", "stream": True}), "body.stream", None),
    (line(custom_id=...), "custom_id", None),
    (line(custom_id=7), "custom_id", None),
    (line(custom_id=""), "custom_id", None),
])
def test_every_kind_of_bad_line_gets_a_400_naming_what_is_wrong(raw, param, code):
    (bad,) = read_lines(raw)
    assert isinstance(bad, BadLine)
    document = bad.error.document()["error"]
    assert bad.error.status == 400
    assert (document["param"], document["code"]) == (param, code)
    assert document["type"] == "invalid_request_error"


def test_a_line_without_a_usable_id_is_keyed_by_its_number():
    lines = read_lines(line(custom_id="a") + b"\nnot json\n" + line(custom_id=3))
    assert [x.key for x in lines] == ["a", line_key(2), line_key(3)]


def test_a_bad_line_with_an_id_keeps_it():
    (bad,) = read_lines(line(custom_id="x", url="/v1/nope"))
    assert (bad.custom_id, bad.key) == ("x", "x")


def test_duplicates_name_each_id_and_its_lines():
    raw = b"\n".join([line(custom_id="a"), line(custom_id="b"), line(custom_id="a"),
                      line(custom_id="b", url="/v1/nope"), line(custom_id="c")])
    found = duplicate_ids(read_lines(raw))
    assert found == {"a": [1, 3], "b": [2, 4]}
    message = str(DuplicateIds(found))
    assert "'a' on lines 1, 3" in message and "'b' on lines 2, 4" in message


def test_no_duplicates_among_distinct_ids():
    raw = b"\n".join(line(custom_id=c) for c in "abc")
    assert duplicate_ids(read_lines(raw)) == {}
