"""The engine thread with a fake engine: commands, dispatch, aborts, admission, deadlines."""
from __future__ import annotations

import base64
import struct
import time

import numpy as np

from engine.api import (FINISH_DEADLINE, FINISH_LENGTH, EngineStats, GenRequest, PromptTooLong,
                        TokenOut)
from server.admission import AdmissionGate
from server.bridge import EngineBridge, Failed, Refused
from tests.polling import wait_for


class FakeEngine:
    """Emits prompt[-1] + 1, +2, ... one token per step per request; refuses past running_limit."""

    def __init__(self, *, running_limit: int = 8):
        self.seqs: dict[int, list] = {}
        self.aborted: list[int] = []
        self.next_id = 0
        self.running_limit = running_limit

    def add_request(self, req: GenRequest) -> int:
        if len(self.seqs) >= self.running_limit:
            raise PromptTooLong("no room")
        self.seqs[self.next_id] = [req, 0]
        self.next_id += 1
        return self.next_id - 1

    def abort(self, rid: int) -> None:
        if self.seqs.pop(rid, None) is not None:
            self.aborted.append(rid)

    def abort_all(self) -> None:
        for rid in list(self.seqs):
            self.abort(rid)

    def has_work(self) -> bool:
        return bool(self.seqs)

    def step(self) -> list[TokenOut]:
        outs = []
        for rid, entry in list(self.seqs.items()):
            req, n = entry
            entry[1] = n + 1
            finish = FINISH_LENGTH if n + 1 >= req.max_tokens else None
            outs.append(TokenOut(id=rid, token=req.prompt[-1] + n + 1, finish=finish))
            if finish:
                del self.seqs[rid]
        return outs

    def stats(self) -> EngineStats:
        return EngineStats(active_sequences=len(self.seqs))

    def embed(self, inputs):
        return np.array([[float(len(x)), 0.5] for x in inputs], dtype=np.float32)


def test_tokens_reach_the_ticket_and_release_the_slot():
    engine, gate = FakeEngine(), AdmissionGate(1)
    bridge = EngineBridge(engine)
    wakes = []
    bridge.wake = lambda: wakes.append(1)
    bridge.start()
    try:
        assert gate.try_reserve()
        ticket = bridge.submit(GenRequest(prompt=(10,), max_tokens=3), on_leave_queue=gate.release)
        assert wait_for(lambda: ticket.is_finished and len(ticket.events) == 3)
        assert [e.token for e in ticket.events] == [11, 12, 13]
        assert ticket.events[-1].finish == FINISH_LENGTH
        assert gate.waiting == 0 and wakes
        assert ticket.scheduled_s is not None and ticket.first_token_s is not None
    finally:
        bridge.stop()


def test_abort_reaches_the_engine():
    engine = FakeEngine()
    bridge = EngineBridge(engine, step_delay_s=0.01)
    bridge.start()
    try:
        ticket = bridge.submit(GenRequest(prompt=(1,), max_tokens=10_000))
        assert wait_for(lambda: len(ticket.events) > 0)
        bridge.abort(ticket)
        assert wait_for(lambda: engine.aborted == [0])
        assert wait_for(lambda: bridge.stats.active_sequences == 0)
    finally:
        bridge.stop()


def test_engine_refusal_becomes_refused_and_frees_the_slot():
    engine, gate = FakeEngine(running_limit=0), AdmissionGate(2)
    bridge = EngineBridge(engine)
    bridge.start()
    try:
        gate.try_reserve()
        ticket = bridge.submit(GenRequest(prompt=(1,)), on_leave_queue=gate.release)
        assert wait_for(lambda: len(ticket.events) == 1)
        assert ticket.events[0] == Refused("no room", too_long=True) and gate.waiting == 0
    finally:
        bridge.stop()


def test_an_engine_bug_in_add_request_is_a_failure_not_a_refusal():
    """A bare ValueError from the engine is a bug (500), never a client error (400)."""
    class Buggy(FakeEngine):
        def add_request(self, req):
            raise ValueError("bug")
    gate = AdmissionGate(1)
    bridge = EngineBridge(Buggy())
    bridge.start()
    try:
        gate.try_reserve()
        ticket = bridge.submit(GenRequest(prompt=(1,)), on_leave_queue=gate.release)
        assert wait_for(lambda: len(ticket.events) == 1)
        assert isinstance(ticket.events[0], Failed) and gate.waiting == 0
    finally:
        bridge.stop()


def test_engine_deadline_event_reaches_the_ticket_and_frees_the_slot():
    """The engine expires unscheduled requests itself (Engine.step -> FINISH_DEADLINE); the
    bridge only delivers that event. The real engine path: tests/e2e/test_faults.py."""
    class NeverSchedules(FakeEngine):
        def step(self):                  # like Engine.step: expire past-deadline waiters
            now, outs = time.monotonic(), []
            for rid, (req, _) in list(self.seqs.items()):
                if now > req.deadline_s:
                    del self.seqs[rid]
                    outs.append(TokenOut(id=rid, token=None, finish=FINISH_DEADLINE))
            return outs
    engine, gate = NeverSchedules(), AdmissionGate(1)
    bridge = EngineBridge(engine)
    bridge.start()
    try:
        assert gate.try_reserve()
        ticket = bridge.submit(GenRequest(prompt=(1,), deadline_s=time.monotonic() + 0.05),
                               on_leave_queue=gate.release)
        assert wait_for(lambda: ticket.is_finished and len(ticket.events) == 1)
        assert ticket.events[0].token is None and ticket.events[0].finish == FINISH_DEADLINE
        assert gate.waiting == 0 and not engine.seqs
        assert engine.aborted == []                     # the bridge did not abort it again
    finally:
        bridge.stop()


def test_embeddings_run_on_the_engine_thread_in_both_formats():
    class SignedEmbeddings(FakeEngine):
        def embed(self, inputs):
            return np.array([[1.0, -2.5]] * len(inputs), dtype=np.float32)
    bridge = EngineBridge(FakeEngine())
    signed = EngineBridge(SignedEmbeddings())
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
    gate = AdmissionGate(1)
    bridge = EngineBridge(FakeEngine())
    assert gate.try_reserve()
    ticket = bridge.embed([[1, 2]], "float", on_leave_queue=gate.release)
    assert gate.waiting == 1 and not gate.try_reserve()       # queued: the slot is held
    bridge.start()
    try:
        assert wait_for(lambda: ticket.done)
        assert ticket.result == [[2.0, 0.5]] and gate.waiting == 0
    finally:
        bridge.stop()


def test_abort_of_a_finished_ticket_posts_nothing():
    bridge = EngineBridge(FakeEngine())             # not started: commands stay in the inbox
    ticket = bridge.submit(GenRequest(prompt=(1,), max_tokens=1))
    ticket.is_finished = True
    bridge.abort(ticket)
    assert [verb for verb, _ in bridge._inbox] == ["add"] and not ticket.is_aborted
    ticket.is_finished = False
    bridge.abort(ticket)
    bridge.abort(ticket)                            # once only
    assert [verb for verb, _ in bridge._inbox] == ["add", "abort"] and ticket.is_aborted
