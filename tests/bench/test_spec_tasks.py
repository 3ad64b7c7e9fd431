"""bench/spec_bench.py's tasks are the four the benchmark promises, and its arithmetic (whole-request
tok/s, acceptance from whatever spec counters /metrics has) is right. The benchmark itself
is never run here: no server, no timing."""
from __future__ import annotations

import argparse
import json
import re

import jsonschema
import pytest

from bench.load_client import LoadResult, StreamRecord
from bench.spec_bench import (ALL_SOURCES, FAILED_MARK, acceptance, cell_requests, spec_delta,
                              summarize_cell, table, whole_requests)
from bench.spec_files import FILES
from bench.spec_tasks import AGENT_TURNS, CITIES_PER_TRIP, TOOLS, tasks, ticket_schema
from engine.tokenizer import tokenizer_from_json
from tests.oracle import HF_DIR

TASKS = tasks()


@pytest.fixture(scope="module")
def smol_tokenizer():
    return tokenizer_from_json(HF_DIR / "tokenizer.json")


def test_edit_files_are_300_to_600_smol_tokens(smol_tokenizer):
    sizes = {f.name: len(smol_tokenizer.encode(f.text)) for f in FILES}
    assert len(sizes) >= 4
    assert all(300 <= n <= 600 for n in sizes.values()), sizes


def test_each_edit_predicts_its_original_file_and_asks_one_change():
    docs = TASKS["edit"].docs
    assert len({json.dumps(d) for d in docs}) == len(docs) == sum(len(f.changes) for f in FILES)
    for doc in docs:
        user = doc["messages"][-1]["content"]
        source = next(f for f in FILES if f.text in user)
        assert doc["prediction"] == {"type": "content", "content": f"```{source.fence}\n{source.text}```"}
        assert sum(change in user for change in source.changes) == 1
        assert doc["max_tokens"] > 600                     # room for the whole file
    # the first len(FILES) requests (a quick run's minimum) already cover every file
    firsts = [TASKS["edit"].doc(i)["messages"][-1]["content"] for i in range(len(FILES))]
    assert all(any(f.text in u for u in firsts) for f in FILES)


def _resolve(schema: dict, node: dict) -> dict:
    return schema["$defs"][node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node


def test_extraction_schema_has_6_to_10_fields_enums_and_nested_objects():
    schema = ticket_schema()
    fields = {name: _resolve(schema, node) for name, node in schema["properties"].items()}
    assert 6 <= len(fields) <= 10
    assert set(schema["required"]) == set(fields) and schema["additionalProperties"] is False
    nested = {n: f for n, f in fields.items() if f.get("type") == "object"}
    enums = [n for n, f in fields.items() if "enum" in f]
    nested_enums = [n for f in nested.values() for n, p in f["properties"].items()
                    if "enum" in _resolve(schema, p)]
    assert len(nested) >= 2 and len(enums) + len(nested_enums) >= 3
    for doc in TASKS["extract"].docs:
        spec = doc["response_format"]["json_schema"]
        assert spec["strict"] is True and spec["schema"] == schema


def test_extraction_emails_differ_in_sender_order_and_wording():
    emails = [doc["messages"][-1]["content"] for doc in TASKS["extract"].docs]
    assert len(set(emails)) == len(emails) >= 34           # a 16-stream run and its warm-up
    senders = {e.split("\n", 1)[0] for e in emails}
    orders = {re.search(r"\b[A-Z]{2}-\d+\b", e).group() for e in emails}
    subjects = {e.split("\n")[1] for e in emails}
    assert len(senders) >= 8 and len(orders) == len(emails) and len(subjects) >= 6


def test_extraction_schema_enforces_its_enums():
    schema = ticket_schema()
    ticket = {"customer": {"name": "Maria", "email": "m@x.example", "plan": "pro"},
              "category": "billing", "priority": "high", "sentiment": "negative",
              "product_area": "billing", "summary": "Charged twice.", "affected_users": 1,
              "order": {"order_id": "NW-20931", "amount_eur": 49.0},
              "requested_action": "refund"}
    jsonschema.validate(ticket, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**ticket, "priority": "whenever"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**ticket, "customer": {**ticket["customer"], "plan": "gold"}}, schema)


def test_agent_loop_has_10_turns_of_two_tools_with_a_growing_history():
    docs = TASKS["agent"].docs
    assert TASKS["agent"].min_requests == AGENT_TURNS == 10
    assert len(docs) % AGENT_TURNS == 0
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    assert len(params) == 2
    for start in range(0, len(docs), AGENT_TURNS):
        loop = docs[start:start + AGENT_TURNS]
        for turn, doc in enumerate(loop):
            assert doc["tool_choice"] == "required" and doc["tools"] == list(TOOLS)
            calls = [c["function"] for m in doc["messages"] if m["role"] == "assistant"
                     for c in m["tool_calls"]]
            results = [m for m in doc["messages"] if m["role"] == "tool"]
            assert len(calls) == len(results) == turn      # each turn adds a call and its result
            for call in calls:
                jsonschema.validate(json.loads(call["arguments"]), params[call["name"]])
            if turn:                                       # the history grows: earlier turns are its prefix
                assert loop[turn - 1]["messages"] == doc["messages"][:-2]
        last_calls = {json.dumps(c) for m in loop[-1]["messages"] if m["role"] == "assistant"
                      for c in m["tool_calls"]}
        assert len(last_calls) == AGENT_TURNS - 1         # the arguments change every turn
        assert {json.loads(c)["function"]["name"] for c in last_calls} == set(params)
    cities = [json.loads(c["function"]["arguments"])["city"] for doc in docs[AGENT_TURNS - 1::AGENT_TURNS]
              for m in doc["messages"] if m["role"] == "assistant" for c in m["tool_calls"]
              if c["function"]["name"] == "get_weather"]
    assert len(cities) == len(set(cities)) == CITIES_PER_TRIP * len(docs) // AGENT_TURNS


def test_chat_prompts_differ_and_foreign_bodies_drop_the_prediction():
    chat = TASKS["chat"]
    assert chat.doc(1) != chat.doc(2) and chat.doc(1)["ignore_eos"] is True
    ours = json.loads(TASKS["edit"].body(0, "smol"))
    theirs = json.loads(TASKS["edit"].body(0, "smol", foreign=True))
    assert ours["prediction"]["type"] == "content" and "prediction" not in theirs
    assert ours["stream"] and ours["stream_options"] == {"include_usage": True}
    assert ours["temperature"] == 0 and {k: v for k, v in ours.items() if k != "prediction"} == theirs


def _record(sent_s: float, ended_s: float, tokens: int, status: int = 200) -> StreamRecord:
    return StreamRecord(sent_s=sent_s, usage_tokens=tokens, status=status, done=True,
                        ended_s=ended_s)


def test_whole_requests_counts_usage_tokens_from_first_send_to_last_byte():
    records = [_record(1.0, 3.0, 30), _record(2.0, 5.0, 50), _record(2.5, 4.0, 99, status=500)]
    row = whole_requests(LoadResult(records, start_s=0.0, end_s=9.0, client_cpu_s=0.0, wall_s=9.0))
    assert row["completion_tokens"] == 80                  # the failed request counts no tokens
    assert row["tok_s"] == pytest.approx(80 / 4.0)         # 1.0 (first send) .. 5.0 (last byte)
    assert (row["requests_ok"], row["requests_failed"]) == (2, 1)
    records[0].resent = 1
    assert whole_requests(LoadResult(records, 0.0, 9.0, 0.0, 9.0))["requests_resent"] == 1


def test_acceptance_reads_spec_counters_per_source_or_in_total():
    before = {'tl_engine_spec_draft_tokens_total{source="prediction"}': 10.0,
              'tl_engine_spec_accepted_tokens_total{source="prediction"}': 5.0,
              'tl_engine_spec_draft_tokens_total{source="suffix"}': 0.0,
              "tl_engine_steps_total": 3.0}
    after = {'tl_engine_spec_draft_tokens_total{source="prediction"}': 110.0,
             'tl_engine_spec_accepted_tokens_total{source="prediction"}': 95.0,
             'tl_engine_spec_draft_tokens_total{source="suffix"}': 100.0,
             'tl_engine_spec_accepted_tokens_total{source="suffix"}': 10.0,
             "tl_engine_steps_total": 9.0}
    delta = spec_delta(before, after)
    assert delta == {"prediction": [100.0, 90.0], "suffix": [100.0, 10.0]}
    assert acceptance(delta) == pytest.approx(0.5)         # (90 + 10) / (100 + 100)
    totals = {"tl_engine_spec_draft_tokens_total": 40.0, "tl_engine_spec_accepted_tokens_total": 30.0}
    assert acceptance(spec_delta({}, {**after, **totals})) == pytest.approx(0.75)   # the totals win
    assert ALL_SOURCES in spec_delta({}, totals)
    assert acceptance(spec_delta({}, {"tl_engine_steps_total": 1.0})) is None     # no counters


def test_a_cell_sends_at_least_the_tasks_minimum_and_the_table_marks_what_is_missing():
    args = argparse.Namespace(per_stream=2, min_requests=True)
    assert cell_requests(TASKS["agent"], 1, args) == AGENT_TURNS
    assert cell_requests(TASKS["agent"], 16, args) == 32
    quick = argparse.Namespace(per_stream=1, min_requests=False)
    assert cell_requests(TASKS["agent"], 4, quick) == 4
    row = {"task": "edit", "streams": 1, "off": {"tok_s_median": 20.0},
           "on": {"tok_s_median": 60.0}, "on_over_off": 3.0, "acceptance": None}
    line = table([row])[1].split()
    assert line == ["edit", "1", "20", "60", "3", "-", "-", "-"]


def test_a_cell_carries_each_servers_failures_and_the_table_marks_them():
    def run(tok_s: float, failed: int = 0, resent: int = 0) -> dict:
        return {"tok_s": tok_s, "requests_failed": failed, "requests_resent": resent}
    runs = {"off": [run(20.0), run(22.0), run(21.0)], "on": [run(60.0), run(58.0), run(61.0)],
            "llama": [run(70.0, failed=2, resent=3), run(72.0, resent=1), run(71.0)]}
    row = summarize_cell("chat", 1, 4, runs, {"on": {}})
    assert [(row[n]["failed"], row[n]["resent"]) for n in runs] == [(0, 0), (0, 0), (2, 4)]
    assert json.loads(json.dumps(row))["llama"]["failed"] == 2    # in the JSON line
    lines = table([row])
    assert lines[1].split() == ["chat", "1", "21", "60", "2.857", "-", "71" + FAILED_MARK,
                                "0.845"]
    assert lines[-1].startswith(FAILED_MARK) and len(lines) == 3
    clean = summarize_cell("chat", 1, 4, {"off": runs["off"], "on": runs["on"]}, {"on": {}})
    assert FAILED_MARK not in "".join(table([clean]))
