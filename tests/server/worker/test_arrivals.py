"""The arrival window: an idle engine's first step takes the whole burst, not its first request.

`ArrivalWindow.gather` runs on a manual clock and a scripted condition (its quiet-gap exit,
its window, its stop); the bridge tests pace the engine with permits, never with sleeps."""
from __future__ import annotations

import pytest

from engine.api import GenRequest
from server.worker.arrivals import ArrivalWindow
from tests.fakes import Clock, FakeEngine, PacedSteps, bridge_for
from tests.polling import wait_for


class StepRecorder(FakeEngine):
    """A FakeEngine that records how many requests each step held."""

    def __init__(self):
        super().__init__(running_limit=64)
        self.step_sizes: list[int] = []

    def step(self):
        self.step_sizes.append(len(self.seqs))
        return super().step()


def _burst(bridge, count: int) -> list:
    return [bridge.submit(GenRequest(prompt=(i,), max_tokens=2)) for i in range(count)]


def test_a_burst_on_an_idle_engine_lands_in_one_step():
    engine = StepRecorder()
    # a quiet gap far above the submitting loop's spacing, so a loaded machine cannot split it
    bridge = bridge_for(engine, capacity=16, arrivals=ArrivalWindow(window_ms=5000, quiet_ms=300))
    bridge.start()
    try:
        tickets = _burst(bridge, 6)
        assert wait_for(lambda: all(t.is_finished for t in tickets))
        assert engine.step_sizes[0] == 6
    finally:
        bridge.stop()


def test_without_the_window_the_first_arrival_steps_alone():
    """The window off: the engine thread takes the first arrival into a step at once (its
    step waits for the test's permit), so the rest of the burst lands after that step."""
    engine = PacedSteps(StepRecorder())
    bridge = bridge_for(engine, capacity=16, arrivals=ArrivalWindow(window_ms=0))
    bridge.start()
    try:
        first = bridge.submit(GenRequest(prompt=(0,), max_tokens=2))
        assert wait_for(lambda: first.engine_id is not None)    # taken: its step is waiting
        tickets = [first] + _burst(bridge, 5)
        engine.permit(100)
        assert wait_for(lambda: all(t.is_finished for t in tickets))
        assert engine.step_sizes[0] == 1
    finally:
        engine.permit(100)
        bridge.stop()


class ScriptedCondition:
    """Stands in for the bridge's Condition: each `wait(timeout)` runs out its whole timeout
    on the manual clock, and the commands the script posts "during" that wait land in the
    inbox. No thread, no sleep: the clock is the only time there is."""

    def __init__(self, clock: Clock, posted_per_wait=()):
        self.clock, self.inbox, self.waits_s = clock, [], []
        self._posted = list(posted_per_wait)        # commands posted during wait 1, 2, ...

    def wait(self, timeout_s: float) -> bool:
        self.waits_s.append(timeout_s)
        self.clock.advance(timeout_s)
        self.inbox.extend(["add"] * (self._posted.pop(0) if self._posted else 0))
        return False


def gathered(window: ArrivalWindow, cond: ScriptedCondition, stopping: bool = False) -> float:
    """Run `gather` with the first arrival already in the inbox: -> the time it waited."""
    cond.inbox.append("add")
    started_s = cond.clock()
    window.gather(cond, lambda: len(cond.inbox), lambda: stopping, clock=cond.clock)
    return cond.clock() - started_s


def test_gather_ends_one_quiet_gap_after_a_lone_arrival():
    """The quiet-gap exit: a lone request pays 20 ms, not the 10 s window."""
    cond = ScriptedCondition(Clock())
    waited_s = gathered(ArrivalWindow(window_ms=10_000, quiet_ms=20), cond)
    assert waited_s == pytest.approx(0.020)
    assert cond.waits_s == [pytest.approx(0.020)]


def test_gather_waits_while_arrivals_keep_coming_then_one_quiet_gap():
    cond = ScriptedCondition(Clock(), posted_per_wait=[3, 1, 0, 5])
    waited_s = gathered(ArrivalWindow(window_ms=10_000, quiet_ms=20), cond)
    assert waited_s == pytest.approx(3 * 0.020)      # two gaps with arrivals, one quiet
    assert len(cond.inbox) == 1 + 3 + 1              # the fourth wait never happened


def test_gather_ends_at_the_window_when_arrivals_never_pause():
    cond = ScriptedCondition(Clock(), posted_per_wait=[1] * 100)
    waited_s = gathered(ArrivalWindow(window_ms=200, quiet_ms=30), cond)
    assert waited_s == pytest.approx(0.200)          # 6 gaps of 30 ms, then the last 20 ms
    assert cond.waits_s[-1] == pytest.approx(0.020)


def test_gather_returns_at_once_when_stopping_or_off():
    cond = ScriptedCondition(Clock(), posted_per_wait=[1] * 100)
    assert gathered(ArrivalWindow(window_ms=60_000, quiet_ms=60_000), cond, stopping=True) == 0
    assert gathered(ArrivalWindow(window_ms=0), cond) == 0
    assert cond.waits_s == []
