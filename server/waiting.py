"""How long a new request would wait for a batch slot: the admission estimate.

A request is either refused before its response head or served to its end (fail fast,
never fail late). So the bridge asks, at admission, how long this request would wait
behind the sequences already running and queued, and refuses it at once (429) when that
is longer than the server holds a request (`queue_deadline_ms`). The same figure, in
whole seconds (at least 1), is the `Retry-After` of every 429 and 503 the queue gives:
a client that honours it comes back when there is room, not one second later.

The model is a queue served by `max_num_seqs` parallel slots:

    completions_needed = running + waiting + returning + 1 - max_num_seqs   (0: a slot is free)
    wait_s             = completions_needed * mean_service_s / max_num_seqs

where `mean_service_s` is measured: an exponentially weighted mean of how long finished
requests ran from their first scheduled step to their last token. Until one has finished
(the first burst on a fresh server) it is the measured step time times the mean token
budget (`max_tokens`) of admitted requests: a request needs about one step per token.
A step still running counts with its elapsed time (the first step of a cold burst is the
slowest). Before the first step there is nothing to measure and the estimate is 0 (admit;
the queue deadline and capacity still bound the wait). `returning` counts clients refused
earlier whose Retry-After has not yet passed: they come back ahead of this one, so a herd
of refused clients is spread over later seconds instead of all returning at once. Thread use: the engine thread writes floats,
the loop thread reads them; no lock is needed for that.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

MIN_RETRY_AFTER_S = 1        # what load balancers and the gateway honour before retrying
# openai-python ignores a Retry-After above 60 s (it then backs off for at most 8 s and burns
# its retries); a longer estimate is sent as 60 so clients that honour it come back late,
# not early.
MAX_RETRY_AFTER_S = 60
SERVICE_SMOOTHING = 0.2      # weight of the newest finished request in the mean


@dataclass(frozen=True)
class WaitInputs:
    """What the estimate reads: the queue now, and the batch size."""
    running_requests: int
    waiting_requests: int
    max_num_seqs: int
    step_running_s: float = 0.0         # how long the step in progress has taken so far
    returning_requests: int = 0         # refused clients not yet back (RefusedClients)


class WaitEstimator:
    """Measured service time in, expected wait for one more request out."""

    def __init__(self, *, smoothing: float = SERVICE_SMOOTHING):
        if not 0.0 < smoothing <= 1.0:
            raise ValueError("smoothing must be in (0, 1]")
        self._smoothing = smoothing
        self.mean_service_s = 0.0           # 0.0: nothing has finished yet
        self.mean_step_s = 0.0              # 0.0: no step yet
        self.mean_budget_tokens = 0.0       # 0.0: nothing admitted yet

    def observe_service(self, service_s: float) -> None:
        """One request finished after `service_s` seconds in the batch (engine thread)."""
        service_s = max(0.0, float(service_s))
        self.mean_service_s = self._mean(self.mean_service_s, service_s)

    def observe_step(self, step_s: float) -> None:
        """One engine step took `step_s` seconds (engine thread)."""
        self.mean_step_s = self._mean(self.mean_step_s, max(0.0, float(step_s)))

    def observe_budget(self, budget_tokens: int) -> None:
        """A request was admitted with this completion budget (loop thread)."""
        self.mean_budget_tokens = self._mean(self.mean_budget_tokens, float(budget_tokens))

    def service_s(self, step_running_s: float = 0.0) -> float:
        """Expected seconds one request spends in the batch: measured, else steps x tokens."""
        if self.mean_service_s > 0.0:
            return self.mean_service_s
        return max(self.mean_step_s, step_running_s) * self.mean_budget_tokens

    def _mean(self, mean: float, value: float) -> float:
        return value if mean == 0.0 else mean + self._smoothing * (value - mean)

    def wait_s(self, inputs: WaitInputs) -> float:
        """Seconds one more request would wait before its first step (0 if a slot is free)."""
        slots = max(1, inputs.max_num_seqs)
        needed = (inputs.running_requests + inputs.waiting_requests
                  + inputs.returning_requests + 1 - slots)
        if needed <= 0:
            return 0.0
        return needed * self.service_s(inputs.step_running_s) / slots


class RefusedClients:
    """When the clients refused with a Retry-After will be back (loop thread only)."""

    def __init__(self) -> None:
        self._back_at_s: list[float] = []           # a min-heap of return times

    def refused(self, now_s: float, retry_s: int) -> None:
        heapq.heappush(self._back_at_s, now_s + retry_s)

    def returning(self, now_s: float) -> int:
        while self._back_at_s and self._back_at_s[0] <= now_s:
            heapq.heappop(self._back_at_s)
        return len(self._back_at_s)


def retry_after_s(wait_s: float) -> int:
    """The `Retry-After` value for an estimated wait: whole seconds, within the bounds."""
    return min(MAX_RETRY_AFTER_S, max(MIN_RETRY_AFTER_S, math.ceil(wait_s)))
