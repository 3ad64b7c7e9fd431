"""The off-loop seam (server/offloop/pool.py): work on a pool thread, the answer made on the
polling thread, errors and cancels; and the app through it (prepared and admitted on a pool thread). Synchronised on
events (the work blocks on one, the pool's wake sets another), never on sleeps."""
from __future__ import annotations

import gc
import json
import threading
import weakref
from dataclasses import replace

import pytest

from engine.model.loader import load_model
from server.api import documents as docs
from server.api.app import ApiApp
from server.api.launch import ChatModel
from server.state import ServerState
from server.text.served import ServedModel
from server.door.access import AccessLog, LoggedStream
from server.errors import ApiError, error_response
from server.http.protocol import Request, Response, StreamPoll
from server.offloop.pool import CollectorPause, Inline, OffLoopPool, Outcome, outcome_of
from server.api.chat.render import renderer as chat_renderer
from server.api.generation import GenSpec
from tests.fakes import IdleBridge, ManualOffLoop, tok
from tests.server.api.stream_helpers import generation_stream

WAIT_S = 10.0


class Woken:
    """The pool's wake: an event a test waits on (as the loop waits on its wake socket)."""

    def __init__(self):
        self.event = threading.Event()
        self.count = 0

    def __call__(self):
        self.count += 1
        self.event.set()

    def wait(self):
        assert self.event.wait(WAIT_S), "the pool never woke the loop"
        self.event.clear()


@pytest.fixture
def pool():
    woken = Woken()
    offloop_pool = OffLoopPool(threads=1, wake=woken)
    offloop_pool.start()
    yield offloop_pool, woken
    offloop_pool.stop()


class Built:
    """A work's result that a weak reference can watch."""


# ---- the seam alone -------------------------------------------------------------------------

def test_the_answer_comes_only_after_the_work_and_is_made_on_the_polling_thread(pool):
    offloop_pool, woken = pool
    release, threads = threading.Event(), {}

    def work():
        threads["work"] = threading.current_thread()
        assert release.wait(WAIT_S)
        return b"built"

    def then(outcome: Outcome) -> Response:
        threads["then"] = threading.current_thread()
        return Response(status=201, headers=(("X-A", "1"),), body=outcome.get())

    stream = offloop_pool.run(work, then)
    early = stream.poll(0.0)
    assert early.head is None and early.chunks == [] and not early.done
    assert "then" not in threads and stream.next_deadline_s() is None
    release.set()
    woken.wait()
    out = stream.poll(1.0)
    assert out.head.status == 201 and out.head.content_length == len(b"built")
    assert out.head.headers == (("X-A", "1"),) and out.chunks == [b"built"] and out.done
    assert threads["work"] is not threading.current_thread()
    assert threads["then"] is threading.current_thread()
    assert woken.count == 1


def test_a_stream_answer_takes_over_poll_deadline_and_cancel():
    offloop = ManualOffLoop()
    spec, header = GenSpec(kind="chat", model="m", stream=True), docs.Header("i", 0, "m")
    made, (ticket,), bridge = generation_stream(spec, header, chat_renderer(spec, header),
                                                prompt_tokens=1, route="chat")

    def then(outcome):                          # the continuation hands over the stream
        return made

    stream = offloop.run(lambda: None, then)
    offloop.finish_all()
    bridge.feed(ticket, tok(1))
    first = stream.poll(1.0)
    assert first.head.status == 200 and first.chunks and not first.done
    assert stream.next_deadline_s() == made.next_deadline_s() == 16.0
    stream.cancel()                             # tickets exist: they are aborted
    assert bridge.aborted == [ticket]


def test_cancel_before_the_work_is_done_drops_the_result_and_never_launches(pool):
    offloop_pool, woken = pool
    started, release, ran = threading.Event(), threading.Event(), []
    launched, built = [], []

    def slow():
        started.set()
        assert release.wait(WAIT_S)
        result = Built()                        # what a cancelled stream must not keep alive
        built.append(weakref.ref(result))
        return result

    first = offloop_pool.run(slow, launched.append)
    second = offloop_pool.run(lambda: ran.append("second"), launched.append)   # queued behind
    assert started.wait(WAIT_S)
    first.cancel()
    second.cancel()
    release.set()
    third = offloop_pool.run(lambda: "third", lambda outcome: Response(status=200))
    woken.wait()                                # the first finished (woke), the third too
    answer = third.poll(2.0)                    # polled at each wake, as the loop does
    while answer.head is None:
        woken.wait()
        answer = third.poll(2.0)
    assert answer.head.status == 200 and answer.done
    assert first.poll(2.0) == StreamPoll(done=True)     # no head, ever
    assert built and built[0]() is None         # its result dropped (the pool has moved on)
    assert second.poll(2.0) == StreamPoll(done=True) and ran == []   # never run
    assert launched == []                       # no continuation: no ticket was ever made


def test_the_collector_pauses_while_work_runs_and_resumes_after_or_past_its_limit():
    now = [0.0]
    pause = CollectorPause(max_s=10.0, clock=lambda: now[0])
    assert gc.isenabled()
    try:
        pause.begin()
        pause.begin()                           # two jobs overlap
        assert not gc.isenabled()
        pause.end()
        assert not gc.isenabled()               # one still runs
        pause.end()
        assert gc.isenabled()                   # none runs
        pause.begin()
        pause.begin()
        now[0] = 11.0                           # back-to-back work past the limit
        pause.end()
        assert gc.isenabled()
        pause.end()
        gc.disable()                            # someone else's pause is left alone
        pause.begin()
        pause.end()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_expected_error_drops_the_frames_of_the_work():
    def work():
        built = list(range(10))                 # what the frames would keep alive
        try:
            raise KeyError(built)
        except KeyError:
            raise ApiError("invalid_request", "no") from None

    outcome = outcome_of(work)
    assert isinstance(outcome.error, ApiError) and outcome.error.__traceback__ is None
    assert outcome.error.__context__ is None
    bug = outcome_of(lambda: 1 / 0).error
    assert isinstance(bug, ZeroDivisionError) and bug.__traceback__ is not None   # logged


# ---- the app: prepared and admitted on a pool thread, sent by the loop ---------------------

@pytest.fixture
def app(succ_model_dir, pool):
    offloop_pool, woken = pool
    bridge = RecordingIdleBridge(capacity=4)
    served = ServedModel(load_model(succ_model_dir), "succ", 64)
    api = ApiApp(chats={"succ": ChatModel(served, bridge)}, state=ServerState(),
                 ping_interval_s=15.0, offloop=offloop_pool)
    return api, bridge, woken


class RecordingIdleBridge(IdleBridge):
    def __init__(self, capacity: int):
        super().__init__(capacity)
        self.verbs = []

    def _post(self, command):
        self.verbs.append(type(command).__name__.lower())
        super()._post(command)


def post(app: ApiApp, path: str, body: bytes, rid: str = "rid-1"):
    return app.handle(Request(method="POST", path=path, body=body, request_id=rid))


def answer(stream, woken):
    woken.wait()
    return stream.poll(0.0)


def test_a_prepare_error_keeps_its_status_and_is_counted(app):
    api, bridge, woken = app
    out = answer(post(api, "/v1/chat/completions", b'{"model": "succ", "messages": 3}'), woken)
    assert out.head.status == 400 and out.done
    assert ("X-Request-Id", "rid-1") in out.head.headers
    error = json.loads(b"".join(out.chunks))["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "messages"
    assert api.state.metrics.requests == {("chat", 400, ""): 1}    # no model parsed
    assert bridge.verbs == []


def test_an_unexpected_prepare_failure_is_a_logged_500(app, caplog, monkeypatch):
    api, _, woken = app

    def broken(text):
        raise RuntimeError("tokenizer bug")

    monkeypatch.setattr(api.ctx.chats["succ"].served, "encode", broken)
    body = json.dumps({"model": "succ", "input": "ab"}).encode()
    out = answer(post(api, "/v1/embeddings", body, rid="rid-500"), woken)
    assert out.head.status == 500
    assert json.loads(b"".join(out.chunks))["error"]["code"] == "internal_error"
    assert api.state.metrics.requests == {("embeddings", 500, ""): 1}
    logged = [r for r in caplog.records if "rid-500" in r.getMessage()]
    assert len(logged) == 1 and "tokenizer bug" in str(logged[0].exc_info[1])


def test_admission_happens_on_the_pool_thread_and_a_cancel_after_it_aborts_the_ticket(app):
    api, bridge, woken = app
    body = json.dumps({"model": "succ", "messages": [{"role": "user", "content": "ab"}],
                       "stream": True}).encode()
    stream = post(api, "/v1/chat/completions", body)
    woken.wait()
    assert bridge.verbs == ["add"] and bridge.admission.gate.waiting == 1   # admitted there
    first = stream.poll(0.0)
    assert first.head is None and first.successor is not None    # queued: no head yet
    assert first.successor is stream.delegate
    stream.cancel()
    assert bridge.verbs == ["add", "abort"]


def test_a_client_gone_while_its_generation_is_admitted_has_it_aborted(app, monkeypatch):
    """The cancel comes while the pool thread is inside the handler: the stream it returns
    is cancelled as it is delivered, so its ticket never waits for a client."""
    api, bridge, woken = app
    inside, release = threading.Event(), threading.Event()
    prompt_of = api.ctx.chats["succ"].served.encode

    def held_encode(text):
        inside.set()
        assert release.wait(WAIT_S)
        return prompt_of(text)

    monkeypatch.setattr(api.ctx.chats["succ"].served, "encode", held_encode)
    body = json.dumps({"model": "succ", "messages": [{"role": "user", "content": "ab"}],
                       "stream": True}).encode()
    stream = post(api, "/v1/chat/completions", body)
    assert inside.wait(WAIT_S)
    stream.cancel()                             # the client left mid-preparation
    release.set()
    woken.wait()
    assert bridge.verbs == ["add", "abort"] and stream.poll(0.0) == StreamPoll(done=True)


def test_the_access_wrapper_polls_the_answer_itself_once_it_is_named():
    lines = []
    access = AccessLog(lines.append)
    spec, header = GenSpec(kind="chat", model="m", stream=True), docs.Header("i", 0, "m")
    made, (ticket,), bridge = generation_stream(spec, header, chat_renderer(spec, header),
                                                prompt_tokens=1, route="chat")
    request = Request(method="POST", path="/v1/chat/completions")
    logged = LoggedStream(Inline().run(lambda: made, lambda outcome: None),
                          access.begin(request), access)
    bridge.feed(ticket, tok(1))
    first = logged.poll(1.0)
    assert first.head.status == 200 and first.successor is None   # taken, not passed on
    assert logged.inner is made


def test_small_routes_answer_at_once(app):
    api, _, woken = app
    result = api.handle(Request(method="GET", path="/v1/models"))
    assert isinstance(result, Response) and result.status == 200 and woken.count == 0


def test_the_access_line_of_an_off_loop_error_names_the_model_and_the_error():
    lines = []
    access = AccessLog(lines.append)
    request = Request(method="POST", path="/v1/chat/completions", body=b"")
    error = error_response(ApiError("invalid_request", "bad messages", param="messages"), ())
    noted = replace(error, notes=error.notes + (("model", "succ"),))   # what the app recorded
    inner = Inline().run(lambda: None, lambda outcome: noted)
    stream = LoggedStream(inner, access.begin(request), access)
    assert stream.poll(0.0).done
    line = json.loads(lines[0])
    assert line["status"] == 400 and line["model"] == "succ" and line["error"] == "bad messages"


@pytest.mark.parametrize("path,body,status,model", [
    ("/v1/chat/completions", {"model": "other", "messages": [{"role": "user", "content": "a"}]},
     404, "other"),                                     # the model check itself
    ("/v1/chat/completions", {"model": "succ", "messages": [{"role": "user", "content": "a"}],
                              "max_tokens": 10_000}, 400, "succ"),     # past the context
    ("/v1/embeddings", {"model": "succ", "input": "a" * 200}, 400, "succ"),
    ("/v1/chat/completions", {"model": "succ", "messages": 3}, 400, None),   # never parsed
])
def test_an_error_after_the_body_parsed_is_noted_with_its_model(app, path, body, status, model):
    """The access log reads `model` from the app's notes, never from bodies: every error
    raised once a body named its model carries it (`ApiContext.serving`)."""
    api, _, woken = app
    lines = []
    access = AccessLog(lines.append)
    request = Request(method="POST", path=path, body=json.dumps(body).encode(), request_id="r")
    stream = LoggedStream(api.handle(request), access.begin(request), access)
    woken.wait()
    assert stream.poll(0.0).done
    line = json.loads(lines[0])
    assert line["status"] == status and line["model"] == model
