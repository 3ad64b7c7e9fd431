"""The engine thread with a fake engine: commands, dispatch, aborts, admission, deadlines."""
from __future__ import annotations

import base64
import struct

import numpy as np

import pytest

from engine.api import FINISH_DEADLINE, FINISH_LENGTH, GenRequest, TokenOut
from server.worker.events import Expired, Failed, TooLong, expired_event
from server.errors import ApiError
from tests.fakes import Clock, FakeEngine, PacedSteps, bridge_for
from tests.polling import wait_for


def test_tokens_reach_the_ticket_and_release_the_slot():
    engine = FakeEngine()
    bridge = bridge_for(engine, capacity=1)
    gate = bridge.admission.gate
    wakes = []
    bridge.wake = lambda: wakes.append(1)
    bridge.start()
    try:
        assert gate.waiting == 0                      # submit reserves the one slot
        ticket = bridge.submit(GenRequest(prompt=(10,), max_tokens=3))
        assert wait_for(lambda: ticket.is_finished and len(ticket.events) == 3)
        assert [e.token for e in ticket.events] == [11, 12, 13]
        assert ticket.events[-1].finish == FINISH_LENGTH
        assert gate.waiting == 0 and wakes
        assert ticket.scheduled_s is not None and ticket.first_token_s is not None
    finally:
        bridge.stop()


def test_abort_reaches_the_engine():
    engine = PacedSteps(FakeEngine())
    bridge = bridge_for(engine)
    bridge.start()
    try:
        ticket = bridge.submit(GenRequest(prompt=(1,), max_tokens=10_000))
        engine.permit(1)
        assert wait_for(lambda: len(ticket.events) > 0)
        bridge.abort(ticket)
        engine.permit(1)                    # the turn in progress ends; the next one aborts
        assert wait_for(lambda: engine.aborted == [0])
        assert wait_for(lambda: bridge.stats.active_sequences == 0)
        assert len(ticket.events) < 10_000  # cut short, not run out
    finally:
        engine.permit(10_000)
        bridge.stop()


def test_engine_refusal_becomes_refused_and_frees_the_slot():
    engine = FakeEngine(running_limit=0)
    bridge = bridge_for(engine, capacity=2)
    gate = bridge.admission.gate
    bridge.start()
    try:
        ticket = bridge.submit(GenRequest(prompt=(1,)))
        assert wait_for(lambda: len(ticket.events) == 1)
        assert ticket.events[0] == TooLong("no room") and gate.waiting == 0
    finally:
        bridge.stop()


def test_an_engine_bug_in_add_request_is_a_failure_not_a_refusal():
    """A bare ValueError from the engine is a bug (500), never a client error (400)."""
    class Buggy(FakeEngine):
        def add_request(self, req):
            raise ValueError("bug")
    bridge = bridge_for(Buggy(), capacity=1)
    gate = bridge.admission.gate
    bridge.start()
    try:
        ticket = bridge.submit(GenRequest(prompt=(1,)))
        assert wait_for(lambda: len(ticket.events) == 1)
        assert isinstance(ticket.events[0], Failed) and gate.waiting == 0
    finally:
        bridge.stop()


def test_engine_deadline_event_reaches_the_ticket_and_frees_the_slot():
    """The engine expires unscheduled requests itself (Engine.step -> FINISH_DEADLINE); the
    bridge only delivers that event. The real engine path: tests/e2e/test_faults.py."""
    clock = Clock()

    class NeverSchedules(FakeEngine):
        def step(self):                  # like Engine.step: expire past-deadline waiters
            outs = []
            for rid, (req, _) in list(self.seqs.items()):
                if clock() > req.deadline_s:
                    del self.seqs[rid]
                    outs.append(TokenOut(id=rid, token=None, finish=FINISH_DEADLINE))
            return outs
    engine = NeverSchedules()
    # the bridge sets deadline_s on its clock; driven turn by turn on this thread
    bridge = bridge_for(engine, capacity=1, deadline_ms=50, clock=clock)
    gate = bridge.admission.gate
    assert gate.waiting == 0
    ticket = bridge.submit(GenRequest(prompt=(1,)))
    assert ticket.request.deadline_s == 0.050
    assert bridge.run_once() and not ticket.is_finished and gate.waiting == 1
    clock.advance(0.051)
    bridge.run_once()
    assert ticket.is_finished and len(ticket.events) == 1
    # the engine's FINISH_DEADLINE TokenOut crosses the boundary as Expired (503)
    assert ticket.events[0] == expired_event(50) and isinstance(ticket.events[0], Expired)
    assert ticket.events[0].error().status == 503
    assert gate.waiting == 0 and not engine.seqs
    assert engine.aborted == []                         # the bridge did not abort it again


def test_embeddings_run_on_the_engine_thread_in_both_formats():
    class SignedEmbeddings(FakeEngine):
        def embed(self, inputs):
            return np.array([[1.0, -2.5]] * len(inputs), dtype=np.float32)
    bridge = bridge_for(FakeEngine())
    signed = bridge_for(SignedEmbeddings())
    bridge.start()
    signed.start()
    try:
        floats = bridge.embed([[1, 2, 3], [4]], "float")
        b64 = bridge.embed([[1, 2, 3]], "base64")
        negative = signed.embed([[1]], "base64")
        assert wait_for(lambda: floats.done and b64.done and negative.done)
        assert floats.result == [[3.0, 0.5], [1.0, 0.5]]
        assert struct.unpack("<2f", base64.b64decode(b64.result[0])) == (3.0, 0.5)
        # little-endian float32, the format the official client decodes by default
        assert struct.unpack("<2f", base64.b64decode(negative.result[0])) == (1.0, -2.5)
    finally:
        bridge.stop()
        signed.stop()


def test_an_embedding_frees_its_admission_slot_when_the_engine_takes_it():
    bridge = bridge_for(FakeEngine(), capacity=1)
    gate = bridge.admission.gate
    assert gate.waiting == 0
    ticket = bridge.embed([[1, 2]], "float")
    assert gate.waiting == 1 and not gate.try_reserve()       # queued: the slot is held
    bridge.start()
    try:
        assert wait_for(lambda: ticket.done)
        assert ticket.result == [[2.0, 0.5]] and gate.waiting == 0
    finally:
        bridge.stop()


def test_abort_of_a_finished_ticket_posts_nothing():
    bridge = bridge_for(FakeEngine())               # not started: commands stay in the inbox
    ticket = bridge.submit(GenRequest(prompt=(1,), max_tokens=1))
    ticket.is_finished = True
    bridge.abort(ticket)
    assert [type(c).__name__ for c in bridge._inbox] == ["Add"] and not ticket.is_aborted
    ticket.is_finished = False
    bridge.abort(ticket)
    bridge.abort(ticket)                            # once only
    assert [type(c).__name__ for c in bridge._inbox] == ["Add", "Abort"] and ticket.is_aborted


def test_submit_and_embed_answer_429_when_the_queue_is_full():
    """The bridge is the one queue: a full gate refuses at once, and nothing is queued."""
    bridge = bridge_for(FakeEngine(), capacity=1)    # not started: the slot stays held
    bridge.submit(GenRequest(prompt=(1,)))
    for attempt in (lambda: bridge.submit(GenRequest(prompt=(1,))),
                    lambda: bridge.embed([[1]], "float")):
        with pytest.raises(ApiError) as info:
            attempt()
        assert info.value.status == 429 and ("Retry-After", "1") in info.value.headers
    assert [type(c).__name__ for c in bridge._inbox] == ["Add"]


def test_aborting_a_queued_request_frees_its_admission_slot():
    from engine.api import EngineConfig, SamplingParams
    from engine.core.engine import Engine
    from tests.engine.core.engine_models import succ_model
    engine = PacedSteps(Engine(succ_model(), EngineConfig(max_num_seqs=1)))  # one runs, one waits
    bridge = bridge_for(engine, capacity=1)
    endless = SamplingParams(temperature=0.0, ignore_eos=True)
    bridge.start()
    try:
        running = bridge.submit(GenRequest(prompt=(1,), params=endless, max_tokens=60))
        engine.permit(1)
        assert wait_for(lambda: running.is_scheduled and bridge.admission.gate.waiting == 0)
        queued = bridge.submit(GenRequest(prompt=(2,), params=endless, max_tokens=2))
        engine.permit(1)                    # the next turn adds it (its step then waits)
        assert wait_for(lambda: queued.engine_id is not None)     # in the engine's queue
        assert bridge.admission.gate.waiting == 1 and not queued.is_scheduled
        bridge.abort(queued)
        engine.permit(1)
        assert wait_for(lambda: bridge.admission.gate.waiting == 0)
        again = bridge.submit(GenRequest(prompt=(3,), params=endless, max_tokens=2))
        engine.permit(10_000)               # free running: the rest of `running`, then `again`
        assert wait_for(lambda: again.is_finished)                # the slot was free again
        assert not queued.is_scheduled
    finally:
        engine.permit(10_000)
        bridge.stop()


class EndsAfter:
    """A ticket's output that takes every event and says "end it" once it has `count`."""

    def __init__(self, count: int):
        self.count, self.taken = count, []

    def take(self, events) -> bool:
        while events:
            self.taken.append(events.popleft())
        return len(self.taken) >= self.count


def test_an_output_that_ends_its_request_aborts_it_before_the_next_step():
    """The output's answer is data the engine thread acts on in the same turn: the engine
    is told to abort before it runs another step (no abort command from the loop)."""
    engine = PacedSteps(FakeEngine())
    bridge = bridge_for(engine)
    bridge.start()
    try:
        output = EndsAfter(2)
        ticket = bridge.submit(GenRequest(prompt=(1,), max_tokens=10_000), output=output)
        engine.permit(2)                                    # two steps, a token each
        assert wait_for(lambda: engine.aborted == [0])
        assert [e.token for e in output.taken] == [2, 3] and not ticket.events
        assert ticket.is_finished and ticket.is_aborted
        assert wait_for(lambda: bridge.stats.active_sequences == 0)
    finally:
        engine.permit(10_000)
        bridge.stop()


def test_an_unloaded_adapter_reaches_the_engine_on_its_thread_and_a_stopped_one_drops_it():
    engine = FakeEngine()
    bridge = bridge_for(engine)                     # not started: the command waits
    adapter = object()                              # the bridge passes it on as it is
    bridge.forget_adapter(adapter)
    assert engine.forgotten == []                   # only the engine thread tells the engine
    assert bridge.run_once() is False               # one turn: nothing to step
    assert engine.forgotten == [adapter]
    bridge.start()
    bridge.stop()
    bridge.forget_adapter(adapter)                  # a stopped bridge: nothing to free, no error
    assert engine.forgotten == [adapter]
