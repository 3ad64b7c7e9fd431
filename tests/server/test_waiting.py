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


@pytest.mark.parametrize("wait_s, header", [(0.0, 1), (0.2, 1), (1.0, 1), (1.01, 2), (37.5, 38),
                                            (60.0, 60), (60.5, 60), (250.0, 60)])
def test_retry_after_is_whole_seconds_at_least_one(wait_s, header):
    """...and at most 60: openai-python ignores a longer Retry-After and retries at once."""
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
    expected = retry_after_s(bridge.expected_wait_s())
    with pytest.raises(ApiError) as info:
        bridge.submit(GenRequest(prompt=(1,)))
    err = info.value
    assert err.status == 429 and err.kind == "rate_limit_exceeded"
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


def test_before_any_finish_the_service_is_step_time_times_the_token_budget():
    est = WaitEstimator(smoothing=0.5)
    est.observe_step(0.1)
    est.observe_budget(30)
    est.observe_budget(50)                        # mean budget 40 tokens
    assert est.service_s() == pytest.approx(4.0)
    assert est.wait_s(WaitInputs(running_requests=2, waiting_requests=1,
                                 max_num_seqs=2)) == pytest.approx(4.0)
    est.observe_service(1.5)                      # a finished request: measured wins
    assert est.service_s() == 1.5


def test_a_long_step_in_progress_raises_the_estimate_before_any_measurement():
    est = WaitEstimator()
    est.observe_budget(10)
    inputs = WaitInputs(running_requests=1, waiting_requests=0, max_num_seqs=1,
                        step_running_s=2.0)
    assert est.wait_s(inputs) == pytest.approx(20.0)      # >= 2 s per step x 10 tokens


def test_refused_clients_count_until_their_retry_after_passes():
    from server.waiting import RefusedClients
    refused = RefusedClients()
    refused.refused(now_s=10.0, retry_s=3)
    refused.refused(now_s=10.0, retry_s=5)
    assert refused.returning(12.0) == 2
    assert refused.returning(13.0) == 1 and refused.returning(15.0) == 0
    est = WaitEstimator()
    est.observe_service(4.0)
    spread = WaitInputs(running_requests=2, waiting_requests=0, max_num_seqs=2,
                        returning_requests=2)
    assert est.wait_s(spread) == pytest.approx(3 * 4.0 / 2)   # the two come back first
