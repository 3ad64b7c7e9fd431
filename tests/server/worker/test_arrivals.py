"""The arrival window: an idle engine's first step takes the whole burst, not its first request."""
from __future__ import annotations

import threading
import time

from engine.api import GenRequest
from server.worker.arrivals import ArrivalWindow
from tests.polling import wait_for
from tests.fakes import FakeEngine, bridge_for


class StepRecorder(FakeEngine):
    """A FakeEngine that records how many requests each step held."""

    def __init__(self):
        super().__init__(running_limit=64)
        self.step_sizes: list[int] = []

    def step(self):
        self.step_sizes.append(len(self.seqs))
        return super().step()


def _burst(bridge, count: int, gap_s: float) -> list:
    tickets = []
    for i in range(count):
        tickets.append(bridge.submit(GenRequest(prompt=(i,), max_tokens=2)))
        time.sleep(gap_s)
    return tickets


def test_a_burst_on_an_idle_engine_lands_in_one_step():
    engine = StepRecorder()
    # a quiet gap far above the 1 ms spacing, so a loaded machine cannot split the burst
    bridge = bridge_for(engine, capacity=16, arrivals=ArrivalWindow(window_ms=5000, quiet_ms=300))
    bridge.start()
    try:
        tickets = _burst(bridge, 6, 0.001)
        assert wait_for(lambda: all(t.is_finished for t in tickets))
        assert engine.step_sizes[0] == 6
    finally:
        bridge.stop()


def test_without_the_window_the_first_arrival_steps_alone():
    """The same burst, spread wider than a step, with the window off: the mechanism the
    test above relies on is what groups it."""
    engine = StepRecorder()
    bridge = bridge_for(engine, capacity=16, arrivals=ArrivalWindow(window_ms=0))
    bridge.start()
    try:
        tickets = _burst(bridge, 6, 0.05)
        assert wait_for(lambda: all(t.is_finished for t in tickets))
        assert engine.step_sizes[0] < 6
    finally:
        bridge.stop()


def test_gather_stops_after_a_quiet_gap_and_at_the_window():
    cond = threading.Condition()
    inbox: list[int] = []
    # nothing arrives: one quiet gap and out
    with cond:
        ArrivalWindow(window_ms=10_000, quiet_ms=20).gather(cond, lambda: len(inbox), lambda: False)
    # arrivals that never pause: the window ends the wait
    stop = threading.Event()

    def keep_posting():
        while not stop.is_set():
            with cond:
                inbox.append(1)
                cond.notify()
            time.sleep(0.002)
    poster = threading.Thread(target=keep_posting, daemon=True)
    poster.start()
    try:
        assert wait_for(lambda: len(inbox) > 0)
        with cond:
            seen_before = len(inbox)
            ArrivalWindow(window_ms=200, quiet_ms=1000).gather(cond, lambda: len(inbox), lambda: False)
            assert len(inbox) > seen_before            # it waited while they came ...
    finally:
        stop.set()
        poster.join()
    # ... and returned (the test ends); a stop request also ends it at once
    with cond:
        ArrivalWindow(window_ms=60_000, quiet_ms=60_000).gather(cond, lambda: len(inbox), lambda: True)
