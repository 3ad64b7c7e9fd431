"""How long a new request would wait for a batch slot: the admission estimate.

A request is either refused before its response head or served to its end (fail fast,
never fail late). So the bridge asks, at admission, how long this request would wait
behind the sequences already running and queued, and refuses it at once (429) when that
is longer than the server holds a request (`queue_deadline_ms`).

The model is a queue served by `max_num_seqs` parallel slots:

    completions_needed = running + waiting + 1 - max_num_seqs     (<= 0: a slot is free)
    wait_s             = completions_needed * mean_service_s / max_num_seqs

where `mean_service_s` is measured: an exponentially weighted mean of how long finished
requests ran from their first scheduled step to their last token. Until one has finished
(the first burst on a fresh server) it is what is known for sure: the longest time a request
still running has spent in the batch, or one step, whichever is longer (a step still running
counts with its elapsed time: the first step of a cold burst is the slowest). That errs
towards admitting; the queue deadline (a 503 before any head) and the capacity still bound
the wait. (It used to be the step time times the mean `max_tokens` budget: clients send
budgets of thousands and use a fraction, so a cold server's first estimates were hours.)
Before the first step there is nothing to measure and the estimate is 0 (admit).

The admission rule: **who decides is only who is in the queue now.** A request that finds
a free batch slot (and room in the queue) is admitted, whatever was refused before. Refused
clients shape the `Retry-After` values, never the capacity: the Retry-After of a 429 or 503
is the wait *plus* the clients refused earlier whose Retry-After has not yet passed
(`RefusedClients`, `returning`), so a herd of refused clients is spread over later seconds
instead of all returning at once. (Counting them in the admission itself locked an idle
server out: each refusal added one more "returning" client, and under a trickle of arrivals
the lockout renewed itself for as long as traffic came.)

Thread use: the engine thread writes floats, the loop thread reads them; no lock is needed
for that. `RefusedClients` is read from both threads (a 503 past the deadline is built on
the engine thread), so it holds a lock.
"""
from __future__ import annotations

import heapq
import math
import threading
from dataclasses import dataclass

MIN_RETRY_AFTER_S = 1        # what load balancers and the gateway honour before retrying
# openai-python ignores a Retry-After above 60 s (it then backs off for at most 8 s and burns
# its retries); a longer estimate is sent as 60 so clients that honour it come back late,
# not early.
MAX_RETRY_AFTER_S = 60
SERVICE_SMOOTHING = 0.2      # weight of the newest finished request in the mean
# Refused clients remembered for the Retry-After spread; past this the earliest-returning
# ones are forgotten first (a flood of refusals cannot grow memory without bound).
MAX_REFUSED_TRACKED = 65_536


@dataclass(frozen=True)
class WaitInputs:
    """What the estimate reads: the queue now, and the batch size."""
    running_requests: int
    waiting_requests: int
    max_num_seqs: int
    step_running_s: float = 0.0         # how long the step in progress has taken so far
    returning_requests: int = 0         # refused clients not yet back: Retry-After only


class WaitEstimator:
    """Measured service time in, expected wait for one more request out."""

    def __init__(self, *, smoothing: float = SERVICE_SMOOTHING):
        if not 0.0 < smoothing <= 1.0:
            raise ValueError("smoothing must be in (0, 1]")
        self._smoothing = smoothing
        self.mean_service_s = 0.0           # 0.0: nothing has finished yet
        self.mean_step_s = 0.0              # 0.0: no step yet
        self.longest_running_s = 0.0        # before any finish: the oldest running request

    def observe_service(self, service_s: float) -> None:
        """One request finished after `service_s` seconds in the batch (engine thread)."""
        service_s = max(0.0, float(service_s))
        self.mean_service_s = self._mean(self.mean_service_s, service_s)

    def observe_step(self, step_s: float) -> None:
        """One engine step took `step_s` seconds (engine thread)."""
        self.mean_step_s = self._mean(self.mean_step_s, max(0.0, float(step_s)))

    def observe_running(self, longest_running_s: float) -> None:
        """The request longest in the batch has been there this long (engine thread, after
        each step, while nothing has finished yet): a lower bound of one service."""
        self.longest_running_s = max(0.0, float(longest_running_s))

    def service_s(self, step_running_s: float = 0.0) -> float:
        """Expected seconds one request spends in the batch: measured, else the lower bound
        of what is running (at least one step)."""
        if self.mean_service_s > 0.0:
            return self.mean_service_s
        return max(self.mean_step_s, step_running_s, self.longest_running_s)

    def _mean(self, mean: float, value: float) -> float:
        return value if mean == 0.0 else mean + self._smoothing * (value - mean)

    def wait_s(self, inputs: WaitInputs) -> float:
        """Seconds one more request would wait before its first step, behind the requests
        running and queued now (0 if a slot is free). The admission decision reads this;
        refused clients (`returning_requests`) are not in it."""
        return self._wait_behind(inputs, inputs.running_requests + inputs.waiting_requests)

    def retry_wait_s(self, inputs: WaitInputs) -> float:
        """The wait a refused client is told to sit out: `wait_s` plus the refused clients
        that come back before it (the Retry-After spread)."""
        return self._wait_behind(inputs, inputs.running_requests + inputs.waiting_requests
                                 + inputs.returning_requests)

    def _wait_behind(self, inputs: WaitInputs, ahead_requests: int) -> float:
        slots = max(1, inputs.max_num_seqs)
        needed = ahead_requests + 1 - slots
        if needed <= 0:
            return 0.0
        return needed * self.service_s(inputs.step_running_s) / slots


class RefusedClients:
    """When the clients refused with a Retry-After will be back: they shape later clients'
    Retry-After, never whether a request is admitted."""

    def __init__(self, max_tracked: int = MAX_REFUSED_TRACKED) -> None:
        self._back_at_s: list[float] = []           # a min-heap of return times
        self._max_tracked = max_tracked
        self._lock = threading.Lock()               # the engine thread reads it for 503s

    def refused(self, now_s: float, retry_s: int) -> None:
        with self._lock:
            if len(self._back_at_s) < self._max_tracked:
                heapq.heappush(self._back_at_s, now_s + retry_s)
            else:                                   # full: forget the earliest to return
                heapq.heappushpop(self._back_at_s, now_s + retry_s)

    def returning(self, now_s: float) -> int:
        with self._lock:
            while self._back_at_s and self._back_at_s[0] <= now_s:
                heapq.heappop(self._back_at_s)
            return len(self._back_at_s)


def retry_after_s(wait_s: float) -> int:
    """The `Retry-After` value for an estimated wait: whole seconds, within the bounds."""
    return min(MAX_RETRY_AFTER_S, max(MIN_RETRY_AFTER_S, math.ceil(wait_s)))
