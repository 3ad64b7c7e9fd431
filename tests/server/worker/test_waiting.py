"""The admission estimate (server/worker/waiting.py) and its use by the bridge's submit."""
from __future__ import annotations

import pytest

from engine.api import EngineStats, GenRequest
from server.worker.admission import QueuePolicy
from server.worker.bridge import EngineBridge
from server.errors import ApiError
from server.worker.waiting import WaitEstimator, WaitInputs, retry_after_s


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
    bridge.admission.estimator.observe_service(4.0)         # 1 completion needed / 2 slots * 4 s = 2 s
    bridge.submit(GenRequest(prompt=(1,)))         # 2 s <= 5 s: admitted
    bridge.admission.estimator.observe_service(100.0)       # now 2 completions / 2 * ~23 s: too long
    expected = retry_after_s(bridge.admission.wait_s(bridge.load()))
    with pytest.raises(ApiError) as info:
        bridge.submit(GenRequest(prompt=(1,)))
    err = info.value
    assert err.status == 429 and err.kind == "rate_limit_exceeded"
    assert ("Retry-After", str(expected)) in err.headers and expected > 5
    assert bridge.admission.gate.waiting == 1               # the refused one took no slot


def test_a_full_queue_429_carries_the_estimate():
    bridge = EngineBridge(BusyEngine(), queue=QueuePolicy(capacity_requests=1, deadline_ms=60_000,
                                                          batch_slots=2))
    bridge.admission.estimator.observe_service(3.0)
    bridge.submit(GenRequest(prompt=(1,)))
    with pytest.raises(ApiError) as info:
        bridge.submit(GenRequest(prompt=(1,)))
    assert info.value.status == 429 and ("Retry-After", "3") in info.value.headers


def test_before_any_finish_the_service_is_the_longest_running_or_one_step():
    est = WaitEstimator(smoothing=0.5)
    est.observe_step(0.1)
    assert est.service_s() == pytest.approx(0.1)
    est.observe_running(4.0)                      # one request has been in the batch 4 s
    assert est.service_s() == pytest.approx(4.0)
    assert est.wait_s(WaitInputs(running_requests=2, waiting_requests=1,
                                 max_num_seqs=2)) == pytest.approx(4.0)
    est.observe_service(1.5)                      # a finished request: measured wins
    assert est.service_s() == 1.5


def test_a_long_step_in_progress_raises_the_estimate_before_any_measurement():
    est = WaitEstimator()
    est.observe_step(0.5)
    inputs = WaitInputs(running_requests=1, waiting_requests=0, max_num_seqs=1,
                        step_running_s=2.0)
    assert est.wait_s(inputs) == pytest.approx(2.0)       # at least the step in progress


def test_the_bridge_tells_the_cold_estimate_how_long_its_oldest_request_has_run():
    """Whatever `max_tokens` the clients send, a cold server's estimate grows with what
    actually ran (it was step time x budget: hours for max_tokens = 4096)."""
    from tests.fakes import STEP_S, Clock, SlotEngine
    clock = Clock()
    bridge = EngineBridge(SlotEngine(clock, slots=1), clock=clock,
                          queue=QueuePolicy(capacity_requests=4, deadline_ms=5000))
    bridge.submit(GenRequest(prompt=(1,), max_tokens=100_000))
    for _ in range(10):
        bridge.run_once()
    assert bridge.admission.estimator.mean_service_s == 0.0            # nothing finished yet
    assert bridge.admission.wait_s(bridge.load()) == pytest.approx(10 * STEP_S)  # in the batch since step 1


def test_refused_clients_count_until_their_retry_after_passes():
    from server.worker.waiting import RefusedClients
    refused = RefusedClients()
    refused.refused(now_s=10.0, retry_s=3)
    refused.refused(now_s=10.0, retry_s=5)
    assert refused.returning(12.0) == 2
    assert refused.returning(13.0) == 1 and refused.returning(15.0) == 0


def test_refused_clients_lengthen_the_retry_after_but_never_the_admission_wait():
    est = WaitEstimator()
    est.observe_service(4.0)
    spread = WaitInputs(running_requests=2, waiting_requests=0, max_num_seqs=2,
                        returning_requests=2)
    assert est.wait_s(spread) == pytest.approx(1 * 4.0 / 2)        # only who is queued now
    assert est.retry_wait_s(spread) == pytest.approx(3 * 4.0 / 2)  # the two come back first
    free = WaitInputs(running_requests=1, waiting_requests=0, max_num_seqs=2,
                      returning_requests=500)
    assert est.wait_s(free) == 0.0 and est.retry_wait_s(free) > 0.0


def test_the_refused_clients_kept_are_bounded_forgetting_the_earliest_first():
    from server.worker.waiting import RefusedClients
    refused = RefusedClients(max_tracked=3)
    for retry_s in (5, 1, 9, 7):                  # the 1 s one is forgotten at the fourth
        refused.refused(now_s=0.0, retry_s=retry_s)
    assert refused.returning(0.5) == 3
    assert refused.returning(6.0) == 2            # 5 s passed; 7 and 9 remain
