"""The server's shared state: the drain flag and the request metrics, owned by the loop thread.

Both listeners read it (the API refuses new requests while draining, `/readyz` turns 503)
and serve.py flips it when a drain begins; it lives apart from either app so that neither
imports the other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from server.observe.metrics import ServerMetrics


@dataclass
class ServerState:
    """Shared, loop-thread-owned flags and counters."""
    is_draining: bool = False
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
