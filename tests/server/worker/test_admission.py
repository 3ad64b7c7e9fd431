"""The admission gate (server/worker/admission.py): bounded, released once per reservation, 429 with Retry-After."""
from __future__ import annotations

import threading

import pytest

from server.worker.admission import AdmissionGate, EngineAdmission, EngineLoad, QueuePolicy, queue_full_error


def test_gate_admits_up_to_capacity_then_refuses():
    gate = AdmissionGate(2)
    assert gate.try_reserve() and gate.try_reserve()
    assert not gate.try_reserve()
    assert gate.waiting == 2
    gate.release()
    assert gate.try_reserve()
    assert not gate.try_reserve()


def test_a_full_gate_gives_429_with_retry_after():
    admission = EngineAdmission(QueuePolicy(capacity_requests=1, deadline_ms=1000))
    admission.admit(EngineLoad(running_requests=0))
    with pytest.raises(Exception) as info:
        admission.admit(EngineLoad(running_requests=0))
    assert admission.gate.waiting == 1                 # the refused call took no slot
    err = info.value
    assert err.status == 429
    assert err.document()["error"]["code"] == "rate_limit_exceeded"
    assert err.document()["error"]["type"] == "rate_limit_error"
    assert ("Retry-After", "1") in err.headers
    assert queue_full_error(3).status == 429


def test_release_without_reserve_is_a_bug():
    gate = AdmissionGate(1)
    with pytest.raises(RuntimeError):
        gate.release()
    with pytest.raises(ValueError):
        AdmissionGate(0)


def test_gate_is_exact_under_threads():
    gate = AdmissionGate(50)
    admitted = []

    def worker():
        admitted.append(sum(gate.try_reserve() for _ in range(100)))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 50 and gate.waiting == 50
