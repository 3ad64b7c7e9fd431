"""bench/limit_check.py: a value under its limit (or, `at_least`, reaching it) passes, at the
limit it misses; the report prints one JSON line per check and exits 1 on any miss."""
from __future__ import annotations

import io
import json

from bench.limit_check import LimitCheck, report


def test_a_limit_is_strict_from_above_and_inclusive_from_below():
    assert LimitCheck("c", 0.09, 0.1, "s").passed
    assert not LimitCheck("c", 0.1, 0.1, "s").passed
    assert LimitCheck("t", 10, 10, "tokens", at_least=True).passed
    assert not LimitCheck("t", 9, 10, "tokens", at_least=True).passed


def test_a_row_shows_the_value_beside_its_limit_and_the_verdict():
    row = LimitCheck("compile zod-user", 0.25, 0.1, "s", note="best of 3").row()
    assert row.split() == ["compile", "zod-user", "0.25", "<", "0.1", "s", "MISS", "best", "of", "3"]
    assert LimitCheck("t", 12, 10, "tokens", at_least=True).row().split() == [
        "t", "12", ">=", "10", "tokens", "PASS"]


def test_the_report_prints_json_lines_and_exits_1_on_a_miss():
    checks = [LimitCheck("fast", 0.01, 0.1, "s"), LimitCheck("slow", 2.0, 1.0, "s", note="x")]
    out = io.StringIO()
    assert report(checks, out) == 1
    lines = out.getvalue().splitlines()
    docs = [json.loads(line) for line in lines[:2]]
    assert docs == [
        {"check": "fast", "value": 0.01, "limit": 0.1, "unit": "s", "bound": "max", "pass": True},
        {"check": "slow", "value": 2.0, "limit": 1.0, "unit": "s", "bound": "max", "pass": False,
         "note": "x"}]
    assert lines[2] == "1 PASS, 1 MISS: slow"
    out = io.StringIO()
    assert report(checks[:1], out) == 0 and out.getvalue().splitlines()[-1] == "1 PASS, 0 MISS"
