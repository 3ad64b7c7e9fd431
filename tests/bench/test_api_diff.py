"""bench/api_diff.py's reading of an answer and its comparison: ids and clocks masked (also
inside nested strings), SSE bodies split into parsed events and n choices put in turn,
every changed leaf reported with its path, key order compared, floats within the tolerance
told apart; and its request set asks nothing twice. The benchmark itself (two servers) is
never run here."""
from __future__ import annotations

import json

from bench.api_diff import (ABSENT, FLOAT_TOLERANCE, TIME_PLACEHOLDER, answer_document,
                            choices_in_turn, differences, mask, sse_events)
from bench.api_requests import request_set

HEX24 = "0123456789abcdef01234567"
OTHER_HEX24 = "fedcba9876543210fedcba98"


def test_mask_replaces_minted_ids_anywhere_and_keeps_their_kind():
    doc = {"id": f"chatcmpl-{HEX24}", "object": "chat.completion",
           "choices": [{"message": {"tool_calls": [{"id": f"call_{HEX24}"}]}}],
           "output": [{"id": f"fc_{HEX24}", "call_id": f"call_{OTHER_HEX24}"}],
           "note": f"see resp_{HEX24} and req-{OTHER_HEX24}."}
    assert mask(doc) == {"id": "chatcmpl-<id>", "object": "chat.completion",
                         "choices": [{"message": {"tool_calls": [{"id": "call_<id>"}]}}],
                         "output": [{"id": "fc_<id>", "call_id": "call_<id>"}],
                         "note": "see resp_<id> and req-<id>."}


def test_mask_leaves_what_is_not_a_minted_id():
    # a client's own id, a short hex, words with dashes: all part of the answer
    doc = {"tool_call_id": "call_fixed_vienna", "text": "abc-1234 and x_" + HEX24[:20],
           "model": "smol-135m"}
    assert mask(doc) == doc


def test_mask_replaces_clock_numbers_but_keeps_a_null_and_other_numbers():
    doc = {"created": 1796217521, "response": {"created_at": 1796217521, "completed_at": None,
                                                "usage": {"output_tokens": 16}},
           "ttft_ms": 12.5, "created_by": "someone"}
    assert mask(doc) == {"created": TIME_PLACEHOLDER,
                         "response": {"created_at": TIME_PLACEHOLDER, "completed_at": None,
                                      "usage": {"output_tokens": 16}},
                         "ttft_ms": TIME_PLACEHOLDER, "created_by": "someone"}


def test_two_runs_that_differ_only_in_ids_and_clocks_compare_equal():
    def run(hex_id: str, created: int) -> dict:
        return mask({"id": f"chatcmpl-{hex_id}", "created": created, "choices": [{"text": "hi"}]})
    assert differences("r", run(HEX24, 1), run(OTHER_HEX24, 2)) == []


def test_each_changed_leaf_is_reported_with_its_path():
    before = {"choices": [{"message": {"content": "Hello", "role": "assistant"}}],
              "usage": {"total_tokens": 7}}
    after = {"choices": [{"message": {"content": "Hullo", "role": "assistant"}},
                         {"message": {"content": "x", "role": "assistant"}}],
             "usage": {"total_tokens": 7, "extra": 1}}
    found = [(d.path, d.before, d.after) for d in differences("chat", before, after)]
    assert found == [("choices[0].message.content", "Hello", "Hullo"),
                     ("choices[1]", ABSENT, {"message": {"content": "x", "role": "assistant"}}),
                     ("usage.extra", ABSENT, 1)]
    assert {d.request for d in differences("chat", before, after)} == {"chat"}


def test_a_number_that_changes_type_and_keys_that_change_order_differ():
    found = differences("r", {"a": 1, "b": True}, {"b": 1, "a": 1.0})
    assert [(d.path, d.before, d.after) for d in found] == [
        ("<key order>", ["a", "b"], ["b", "a"]), ("a", 1, 1.0), ("b", True, 1)]


def test_floats_within_the_tolerance_are_told_apart_from_real_changes():
    near, far = differences("r", [-1.8789496757995814, -1.0], [-1.8789433448176014, -1.01])
    assert near.within_tolerance and not far.within_tolerance
    assert (near.path, far.path) == ("[0]", "[1]")
    # the bound itself: 10x the tolerance is a change
    assert not differences("r", 0.5, 0.5 + 10 * FLOAT_TOLERANCE)[0].within_tolerance


def test_sse_events_are_split_named_and_parsed_and_pings_dropped():
    body = ('event: response.created\ndata: {"type": "response.created", "n": 1}\n\n'
            ': ping\n\n'
            'data: {"choices": []}\n\n'
            'data: [DONE]\n\n')
    assert sse_events(body) == [{"event": "response.created",
                                 "data": {"type": "response.created", "n": 1}},
                                {"event": None, "data": {"choices": []}},
                                {"event": None, "data": "[DONE]"}]


def test_an_answer_document_keeps_status_and_headers_masked_without_its_length():
    headers = [("Content-Type", "text/event-stream; charset=utf-8"), ("Content-Length", "99"),
               ("X-Request-Id", f"req-{HEX24}"), ("Allow", "POST")]
    body = f'data: {{"id": "cmpl-{HEX24}", "created": 5}}\n\ndata: [DONE]\n\n'.encode()
    assert answer_document(405, headers, body) == {
        "status": 405,
        "headers": {"content-type": "text/event-stream; charset=utf-8",
                    "x-request-id": "req-<id>", "allow": "POST"},
        "body": {"events": [
            {"event": None, "data": {"id": "cmpl-<id>", "created": TIME_PLACEHOLDER}},
            {"event": None, "data": "[DONE]"}]}}


def test_the_request_set_asks_nothing_twice_and_its_quick_part_is_a_subset():
    every, quick = request_set(), request_set(quick=True)
    asked = [(r.method, r.path, r.payload(), r.declared_bytes) for r in every]
    assert len(set(asked)) == len(asked)
    assert len({r.name for r in every}) == len(every)
    assert 0 < len(quick) < len(every) and {r.name for r in quick} < {r.name for r in every}
    # every route of the API the default server answers is in the set
    assert {r.path for r in every} >= {"/v1/chat/completions", "/v1/completions", "/v1/responses",
                                       "/v1/embeddings", "/v1/tokenize", "/v1/detokenize",
                                       "/v1/models"}
    for r in every:
        if isinstance(r.body, dict):
            assert json.loads(r.payload()) == r.body


def test_n_choices_are_put_in_turn_each_keeping_its_own_order():
    def chunk(index: int, text: str) -> dict:
        return {"event": None, "data": {"choices": [{"index": index, "delta": {"content": text}}]}}
    usage = {"event": None, "data": {"choices": [], "usage": {"total_tokens": 4}}}
    done = {"event": None, "data": "[DONE]"}
    one_run = [chunk(0, "A"), chunk(1, "A"), chunk(0, "b"), chunk(1, "b"), usage, done]
    other_run = [chunk(1, "A"), chunk(0, "A"), chunk(1, "b"), chunk(0, "b"), usage, done]
    in_turn = [chunk(0, "A"), chunk(0, "b"), chunk(1, "A"), chunk(1, "b"), usage, done]
    assert choices_in_turn(one_run) == choices_in_turn(other_run) == in_turn
    # a choice whose own chunks come in another order is still a difference
    swapped = [chunk(0, "b"), chunk(0, "A"), chunk(1, "A"), chunk(1, "b"), usage, done]
    assert choices_in_turn(swapped) != in_turn
