"""Admission cannot lock out: refused clients shape Retry-After, never the capacity.

The bridge (server/worker/bridge.py) is driven turn by turn on the test's thread (`run_once`) with an
injected clock that an engine step advances, so a two-minute load plays out in milliseconds
and without a sleep. The clients behave as real ones do: they send `max_tokens` far above
what their answer uses, some honour the Retry-After of a 429 and come back, some never do.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from engine.api import FINISH_STOP, GenRequest
from server.worker.admission import QueuePolicy
from server.worker.bridge import EngineBridge
from server.errors import ApiError
from tests.fakes import ANSWER_TOKENS, STEP_S, Clock, SlotEngine

LOADED_STEP_S = 0.4             # a step of 128 streams on a 2-core CPU
CLIENT_BUDGET_TOKENS = 4096     # the max_tokens the clients send


@dataclass(order=True)
class Attempt:
    at_s: float
    client: int
    retries: bool = field(compare=False)          # honours Retry-After, or leaves at a 429


@dataclass
class Outcome:
    refusals: dict[int, int] = field(default_factory=dict)     # client -> 429s seen
    served_at_s: dict[int, float] = field(default_factory=dict)  # client -> admitted at
    finished: int = 0


def play(bridge: EngineBridge, clock: Clock, attempts: list[Attempt],
         until_s: float) -> Outcome:
    """Run the clients' attempts and the engine turns in time order until `until_s`."""
    heapq.heapify(attempts)
    outcome, tickets = Outcome(), []
    while clock.now_s < until_s:
        while attempts and attempts[0].at_s <= clock.now_s:
            attempt = heapq.heappop(attempts)
            try:
                tickets.append(bridge.submit(GenRequest(prompt=(1,),
                                                        max_tokens=CLIENT_BUDGET_TOKENS)))
                outcome.served_at_s[attempt.client] = clock.now_s
            except ApiError as err:
                assert err.status == 429
                outcome.refusals[attempt.client] = outcome.refusals.get(attempt.client, 0) + 1
                if attempt.retries:
                    retry_s = int(dict(err.headers)["Retry-After"])
                    heapq.heappush(attempts, Attempt(clock.now_s + retry_s, attempt.client,
                                                     True))
        if not bridge.run_once():                  # idle: jump to the next arrival
            clock.now_s = attempts[0].at_s if attempts else until_s
    outcome.finished = sum(t.is_finished for t in tickets)
    return outcome


def lockout_bridge(clock: Clock, *, slots: int, capacity: int, deadline_ms: int,
                   step_s: float = STEP_S):
    engine = SlotEngine(clock, slots, step_s)
    return EngineBridge(engine, clock=clock, queue=QueuePolicy(
        capacity_requests=capacity, deadline_ms=deadline_ms, batch_slots=slots))


def test_a_burst_that_half_never_returns_leaves_every_later_client_served():
    """300 clients within 2 s against 128 slots (a queue of 64, 5 s deadline, a cold server
    stepping at LOADED_STEP_S): half of those refused leave for good, half honour
    Retry-After. Then one new client a second for two minutes. Once the burst has drained,
    every new client is admitted at its first try."""
    clock = Clock()
    bridge = lockout_bridge(clock, slots=128, capacity=64, deadline_ms=5000,
                            step_s=LOADED_STEP_S)
    burst = [Attempt(c * 2.0 / 300, c, retries=c % 2 == 0) for c in range(300)]
    trickle = [Attempt(float(s), 1000 + s, retries=True) for s in range(1, 121)]
    outcome = play(bridge, clock, burst + trickle, until_s=125.0 + ANSWER_TOKENS * LOADED_STEP_S)

    returning = [c for c in range(300) if c % 2 == 0 or c not in outcome.refusals]
    assert all(c in outcome.served_at_s for c in returning)       # retried until served
    drained_s = max(outcome.served_at_s[c] for c in returning) + ANSWER_TOKENS * LOADED_STEP_S
    assert drained_s < 60.0
    late = [1000 + s for s in range(1, 121) if s > drained_s]
    assert len(late) > 60
    assert [c for c in late if outcome.refusals.get(c)] == []      # never a 429 once drained
    assert all(c in outcome.served_at_s for c in late)
    assert bridge.admission.gate.waiting == 0 and outcome.finished == len(outcome.served_at_s)


def test_an_idle_server_admits_whatever_it_refused_before():
    """The queue-of-one sequence: one running, one queued, more refused, everyone leaves;
    the idle server admits the next request (it used to answer 429 for hours)."""
    clock = Clock()
    bridge = lockout_bridge(clock, slots=1, capacity=1, deadline_ms=5000)
    bridge.admission.estimator.observe_service(2.0)              # answers took 2 s before
    running = bridge.submit(GenRequest(prompt=(1,), max_tokens=CLIENT_BUDGET_TOKENS))
    bridge.run_once()                                  # scheduled: the batch slot is taken
    queued = bridge.submit(GenRequest(prompt=(1,), max_tokens=CLIENT_BUDGET_TOKENS))
    refusals = []
    for _ in range(20):
        try:
            bridge.submit(GenRequest(prompt=(1,), max_tokens=CLIENT_BUDGET_TOKENS))
        except ApiError as err:
            refusals.append(int(dict(err.headers)["Retry-After"]))
    assert len(refusals) == 20
    assert refusals == sorted(set(refusals))           # each one later: the herd is spread
    assert refusals[-1] * 1000 > 5000                  # (counted, they'd pass the deadline)
    bridge.abort(running)
    bridge.abort(queued)
    bridge.run_once()
    assert bridge.stats.active_sequences == 0 and bridge.admission.gate.waiting == 0
    assert bridge.admission.wait_s(bridge.load()) == 0.0
    ticket = bridge.submit(GenRequest(prompt=(1,), max_tokens=CLIENT_BUDGET_TOKENS))
    assert bridge.retry_after_s() > 1                  # the refused still shape Retry-After
    while not ticket.is_finished:
        bridge.run_once()
    assert ticket.events[-1].finish == FINISH_STOP
