"""bench/spec_plan.py: no server process of the speculation benchmark is sent a request twice
(a repeat would be drafted from its own answer by the suffix store). The bookkeeping
(request keys, each process's record) and the plans the benchmark's arguments give."""
from __future__ import annotations

import argparse
import json

import pytest

from bench.load_client import Target
from bench.load_server import Endpoint
from bench.spec_bench import Contender, body_maker, cell_requests
from bench.spec_plan import (WARMUP_CHAT_BASE, RepeatedRequest, SentBodies, check_plan,
                             request_key, run_plan)
from bench.spec_tasks import Task, tasks

TASKS = tasks()
DEFAULTS = argparse.Namespace(per_stream=2, min_requests=True)     # spec_bench's defaults
DEFAULT_WARMUPS = 2


def _body(**doc) -> bytes:
    return json.dumps(doc).encode()


def test_a_request_is_its_question_not_how_its_answer_is_delivered():
    asked = {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}
    key = request_key(_body(**asked, model="a", stream=True, max_tokens=800, temperature=0))
    assert key == request_key(_body(**asked, model="b", stream=False, max_tokens=32,
                                    stream_options={"include_usage": True},
                                    prediction={"type": "content", "content": "x"}))
    assert key != request_key(_body(**{**asked, "messages": [{"role": "user", "content": "ho"}]},
                                    model="a"))
    assert key != request_key(_body(**{**asked, "tools": []}, model="a"))


def test_a_server_process_refuses_a_request_it_was_sent_before_and_another_process_does_not():
    first = SentBodies("on pid 1")
    body = _body(messages=[{"role": "user", "content": "hi"}], max_tokens=800)
    assert first.admit(body) == body and len(first) == 1
    with pytest.raises(RepeatedRequest, match="on pid 1"):
        first.admit(_body(messages=[{"role": "user", "content": "hi"}], max_tokens=32))
    assert SentBodies("on pid 2").admit(body) == body       # a fresh process: new to it


@pytest.mark.parametrize("streams", [1, 4, 16])
@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_run_of_the_default_benchmark_sends_each_process_new_requests_only(name, streams):
    task = TASKS[name]
    plan = run_plan(task, cell_requests(task, streams, DEFAULTS), DEFAULT_WARMUPS)
    check_plan(task, plan)                                 # raises on a repeat
    assert plan.measured == tuple(range(cell_requests(task, streams, DEFAULTS)))
    assert len(plan.warmup) == DEFAULT_WARMUPS and not set(plan.warmup) & set(plan.measured)


def test_a_pool_too_small_for_the_run_is_refused_before_anything_is_measured():
    extract = TASKS["extract"]
    old = Task("extract", 4, extract.docs[:4])             # the four e-mails it used to have
    with pytest.raises(RepeatedRequest, match="4 distinct requests"):
        run_plan(old, cell_requests(old, 16, DEFAULTS), DEFAULT_WARMUPS)
    doubled = Task("dup", 1, (extract.docs[0], extract.docs[1], extract.docs[0]))
    with pytest.raises(RepeatedRequest):
        check_plan(doubled, run_plan(doubled, 2, 1))       # docs 0, 1 measured; 2 (= 0) warm-up
    chat = run_plan(TASKS["chat"], 32, 3)                  # endless: the warm-up far away
    assert chat.warmup == (WARMUP_CHAT_BASE, WARMUP_CHAT_BASE + 1, WARMUP_CHAT_BASE + 2)


def test_bodies_the_benchmark_sends_pass_the_process_record_and_a_second_run_would_not():
    # a server kept up for a second run (the old design) is caught at its first request
    contender = Contender("on", Endpoint(Target("127.0.0.1", 1), "smol"), server=None,
                          sent=SentBodies("on pid 7"))
    task = TASKS["edit"]
    plan = run_plan(task, 4, 1)
    make = body_maker(task, contender, plan.measured, cap=32)
    sent = [json.loads(make(i)) for i in range(len(plan.measured))]
    assert all(doc["max_tokens"] == 32 for doc in sent) and len(contender.sent) == 4
    again = body_maker(task, contender, plan.measured, cap=0)
    with pytest.raises(RepeatedRequest, match="on pid 7"):
        again(0)
