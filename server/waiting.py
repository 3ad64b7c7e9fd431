"""How long a new request would wait for a batch slot: the admission estimate.

A request is either refused before its response head or served to its end (fail fast,
never fail late). So the bridge asks, at admission, how long this request would wait
behind the sequences already running and queued, and refuses it at once (429) when that
is longer than the server holds a request (`queue_deadline_ms`). The same figure, in
whole seconds (at least 1), is the `Retry-After` of every 429 and 503 the queue gives:
a client that honours it comes back when there is room, not one second later.

The model is a queue served by `max_num_seqs` parallel slots:

    completions_needed = running + waiting + 1 - max_num_seqs      (0 when a slot is free)
    wait_s             = completions_needed * mean_service_s / max_num_seqs

where `mean_service_s` is measured: an exponentially weighted mean of how long finished
requests ran from their first scheduled step to their last token. Before anything has
finished there is no measurement and the estimate is 0 (admit; the queue deadline and the
queue capacity still bound the wait). Thread use: the engine thread writes one float,
the loop thread reads it; no lock is needed for that.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MIN_RETRY_AFTER_S = 1        # what load balancers and the gateway honour before retrying
SERVICE_SMOOTHING = 0.2      # weight of the newest finished request in the mean


@dataclass(frozen=True)
class WaitInputs:
    """What the estimate reads: the queue now, and the batch size."""
    running_requests: int
    waiting_requests: int
    max_num_seqs: int


class WaitEstimator:
    """Measured service time in, expected wait for one more request out."""

    def __init__(self, *, smoothing: float = SERVICE_SMOOTHING):
        if not 0.0 < smoothing <= 1.0:
            raise ValueError("smoothing must be in (0, 1]")
        self._smoothing = smoothing
        self.mean_service_s = 0.0           # 0.0: nothing has finished yet

    def observe_service(self, service_s: float) -> None:
        """One request finished after `service_s` seconds in the batch (engine thread)."""
        service_s = max(0.0, float(service_s))
        if self.mean_service_s == 0.0:
            self.mean_service_s = service_s
        else:
            self.mean_service_s += self._smoothing * (service_s - self.mean_service_s)

    def wait_s(self, inputs: WaitInputs) -> float:
        """Seconds one more request would wait before its first step (0 if a slot is free)."""
        slots = max(1, inputs.max_num_seqs)
        needed = inputs.running_requests + inputs.waiting_requests + 1 - slots
        if needed <= 0:
            return 0.0
        return needed * self.mean_service_s / slots


def retry_after_s(wait_s: float) -> int:
    """The `Retry-After` value for an estimated wait: whole seconds, never below the minimum."""
    return max(MIN_RETRY_AFTER_S, math.ceil(wait_s))
