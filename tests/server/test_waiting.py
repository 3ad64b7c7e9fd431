"""The admission estimate (server/waiting.py) and its use by the bridge's submit."""
from __future__ import annotations

import pytest

from engine.api import EngineStats, GenRequest
from server.bridge import EngineBridge, QueuePolicy
from server.errors import ApiError
from server.waiting import WaitEstimator, WaitInputs, retry_after_s


def test_no_wait_while_a_batch_slot_is_free_and_none_before_a_measurement():
    est = WaitEstimator()
    assert est.wait_s(WaitInputs(running_requests=3, waiting_requests=0, max_num_seqs=4)) == 0.0
    assert est.wait_s(WaitInputs(running_requests=4, waiting_requests=9, max_num_seqs=4)) == 0.0


def test_wait_is_completions_needed_times_service_over_slots():
    est = WaitEstimator(smoothing=0.5)
    est.observe_service(2.0)                      # first measurement taken as is
    est.observe_service(4.0)                      # 2 + 0.5 * (4 - 2)
    assert est.mean_service_s == 3.0
    # 4 running + 3 waiting + this one - 4 slots = 4 completions, 4 slots in parallel: 1 service
    assert est.wait_s(WaitInputs(running_requests=4, waiting_requests=3, max_num_seqs=4)) == 3.0


@pytest.mark.parametrize("wait_s, header", [(0.0, 1), (0.2, 1), (1.0, 1), (1.01, 2), (37.5, 38)])
def test_retry_after_is_whole_seconds_at_least_one(wait_s, header):
    assert retry_after_s(wait_s) == header


class BusyEngine:
    def stats(self) -> EngineStats:
        return EngineStats(active_sequences=2)


def test_submit_refuses_at_once_when_the_estimate_exceeds_the_deadline():
    bridge = EngineBridge(BusyEngine(), queue=QueuePolicy(capacity_requests=8, deadline_ms=5000,
                                                          batch_slots=2))
    bridge.estimator.observe_service(4.0)         # 1 completion needed / 2 slots * 4 s = 2 s
    bridge.submit(GenRequest(prompt=(1,)))         # 2 s <= 5 s: admitted
    bridge.estimator.observe_service(100.0)       # now 2 completions / 2 * ~23 s: too long
    with pytest.raises(ApiError) as info:
        bridge.submit(GenRequest(prompt=(1,)))
    err = info.value
    assert err.status == 429 and err.kind == "rate_limit_exceeded"
    expected = retry_after_s(bridge.expected_wait_s())
    assert ("Retry-After", str(expected)) in err.headers and expected > 5
    assert bridge.gate.waiting == 1               # the refused one took no slot


def test_a_full_queue_429_carries_the_estimate():
    bridge = EngineBridge(BusyEngine(), queue=QueuePolicy(capacity_requests=1, deadline_ms=60_000,
                                                          batch_slots=2))
    bridge.estimator.observe_service(3.0)
    bridge.submit(GenRequest(prompt=(1,)))
    with pytest.raises(ApiError) as info:
        bridge.submit(GenRequest(prompt=(1,)))
    assert info.value.status == 429 and ("Retry-After", "3") in info.value.headers
