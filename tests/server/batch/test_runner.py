"""The batch runner (server/batch/runner.py) against a scripted App: many requests in
flight at once, streams collected to their end, admission's refusals run again, other
errors answered, and a stop that finishes what is in flight."""
from __future__ import annotations

import json

from server.batch.lines import Task
from server.batch.runner import BatchRunner, Wake
from server.errors import kind_response
from server.http.protocol import Response, ResponseHead, StreamPoll


def tasks(n: int) -> list[Task]:
    return [Task(i + 1, f"t{i}", "/v1/completions", json.dumps({"i": i}).encode())
            for i in range(n)]


def error_body(code: str) -> bytes:
    return json.dumps({"error": {"message": "no", "type": "x", "param": None,
                                 "code": code}}).encode()


class HeldStream:
    """A generation that ends only once the app releases it: body in two chunks."""

    def __init__(self, app: "ScriptedApp", i: int):
        self.app, self.i, self.polls = app, i, 0

    def has_output(self) -> bool:
        return self.app.released

    def next_deadline_s(self):
        return None

    def poll(self, now_s: float) -> StreamPoll:
        self.polls += 1
        if self.polls == 1:
            return StreamPoll(head=ResponseHead(status=200), chunks=[b'{"i":'])
        self.app.open -= 1
        usage = {"completion_tokens": 3}
        return StreamPoll(chunks=[json.dumps(self.i).encode() + b',"usage":'
                                  + json.dumps(usage).encode() + b"}"], done=True)

    def cancel(self) -> None:
        self.app.cancelled.append(self.i)


class ScriptedApp:
    """Streams held until `hold_for` are open at once (or every task is in); `refuse`:
    custom index -> the Responses to answer first (then a stream)."""

    def __init__(self, wake: Wake, total: int, hold_for: int, refuse=None):
        self.wake, self.total, self.hold_for = wake, total, hold_for
        self.refuse = refuse or {}
        self.seen: list[int] = []
        self.open = self.most_open = 0
        self.cancelled: list[int] = []
        self.released = False

    def handle(self, request):
        i = json.loads(request.body)["i"]
        self.seen.append(i)
        assert request.method == "POST" and request.request_id.startswith("req-")
        if self.refuse.get(i):
            return self.refuse[i].pop(0)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        self.released = self.released or self.open >= self.hold_for or len(set(self.seen)) == self.total
        if self.released:
            self.wake()
        return HeldStream(self, i)

    error = staticmethod(kind_response)


def test_many_requests_are_in_flight_at_once_and_each_is_answered_once():
    wake = Wake()
    app = ScriptedApp(wake, total=10, hold_for=4)
    answers = []
    left = BatchRunner(app, wake, max_in_flight=4).run(tasks(10), answers.append)
    assert left == 0
    assert app.most_open == 4                     # never one at a time, never past the cap
    assert sorted(a.line.custom_id for a in answers) == [f"t{i}" for i in range(10)]
    first = next(a for a in answers if a.line.custom_id == "t3")
    assert (first.status, first.body["i"], first.output_tokens) == (200, 3, 3)


def test_a_refusal_for_now_runs_again_and_other_errors_are_answers():
    wake = Wake()
    busy = Response(status=429, headers=(("Retry-After", "0"),), body=error_body("rate_limit_exceeded"))
    dead = Response(status=503, body=error_body("engine_unavailable"))
    app = ScriptedApp(wake, total=3, hold_for=1, refuse={0: [busy], 1: [dead]})
    answers = {}
    BatchRunner(app, wake, max_in_flight=2).run(tasks(3), lambda a: answers.setdefault(a.line.custom_id, a))
    assert app.seen.count(0) == 2 and answers["t0"].status == 200
    assert app.seen.count(1) == 1 and answers["t1"].status == 503
    assert answers["t1"].body["error"]["code"] == "engine_unavailable"
    assert len(answers) == 3


def test_stop_submits_nothing_more_and_finishes_what_is_in_flight():
    wake = Wake()
    app = ScriptedApp(wake, total=10, hold_for=3)
    answers = []
    runner = BatchRunner(app, wake, max_in_flight=3)

    def on_answer(answer):
        answers.append(answer)
        runner.stop()

    left = runner.run(tasks(10), on_answer)
    assert len(app.seen) == 3 and len(answers) == 3 and left == 7


class BrokenStream(HeldStream):
    def poll(self, now_s: float) -> StreamPoll:
        raise RuntimeError("a bug in a stream")


def test_a_stream_that_raises_is_cancelled_answered_500_and_the_run_goes_on():
    wake = Wake()
    app = ScriptedApp(wake, total=3, hold_for=1)
    plain = app.handle
    app.handle = lambda request: (BrokenStream(app, 1) if json.loads(request.body)["i"] == 1
                                  else plain(request))
    answers = {}
    BatchRunner(app, wake, max_in_flight=3).run(tasks(3), lambda a: answers.setdefault(a.line.custom_id, a))
    assert answers["t1"].status == 500
    assert answers["t1"].body["error"]["code"] == "internal_error"
    assert app.cancelled == [1]
    assert answers["t0"].status == answers["t2"].status == 200
