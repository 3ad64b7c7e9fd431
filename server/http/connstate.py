"""Socket-free bookkeeping for the selectors loop: what a listener and a connection are,
when each connection must next be looked at, the timer heap that fires those moments, and
the drain's flags and deadline.

`server/http/loop.py` makes every socket call; this module only decides *when*. Each connection
has at most one deadline at a time (`connection_deadline`): lingering after an error, a
stream's own deadline (pings, queue timeouts), a slow header or body, keep-alive idleness,
or a client that stopped reading. `TimerHeap` keeps one live entry per connection for its
earliest deadline; a deadline that moves later (the common case: more bytes arrived) does not
touch the heap, the entry re-arms itself when it fires. So thousands of idle connections cost
one heap entry each and no CPU.
"""
from __future__ import annotations

import heapq
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from server.http.http11 import BODY, IDLE, Connection
from server.http.limits import HttpLimits
from server.http.protocol import App, BodySinks, Stream

if TYPE_CHECKING:                       # for annotations only: the loop owns every socket call
    import socket

log = logging.getLogger("tlserve.http")

# "host:port": host may be empty (all interfaces), a name, IPv4, or a bracketed IPv6 address.
LISTEN_ADDRESS = re.compile(r"(?P<host>[^:\s]*|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})")
MAX_PORT = 65535


@dataclass(frozen=True)
class Listener:
    name: str                 # "api" | "health"
    address: str              # "host:port"; ":8000" = all interfaces; port 0 = pick one
    app: App
    closes_on_drain: bool     # the API listener closes when draining; health stays
    sinks: BodySinks | None = None   # the bodies written to a file as they arrive (uploads)


class BindError(OSError):
    """A listener's address could not be bound (in use, not ours); `address` names it."""

    def __init__(self, address: str, exc: OSError):
        super().__init__(exc.errno, f"cannot listen on {address}: {exc.strerror}")
        self.address = address


def parse_address(address: str) -> tuple[str, int]:
    """"host:port" -> (host, port); ":8000" -> ("", 8000) (all interfaces); "[::1]:80" ok.

    The one parser of listen addresses: the config check (server/config.py) and the bind
    (server/http/loop.py) both use it, so an address the config accepts is one the loop binds."""
    match = LISTEN_ADDRESS.fullmatch(address)
    if not match or int(match["port"]) > MAX_PORT:
        raise ValueError(f"listen address {address!r} is not host:port or :port")
    return match["host"].strip("[]"), int(match["port"])


class ListenerState:
    __slots__ = ("spec", "sock", "num_connections", "is_accepting", "is_closed")

    def __init__(self, spec: Listener, sock: socket.socket):
        self.spec, self.sock = spec, sock
        self.num_connections = 0
        self.is_accepting = True
        self.is_closed = False


class ConnState:
    """One accepted socket: its HTTP state, unsent bytes, active stream and timer."""
    __slots__ = ("sock", "http", "listener", "outbuf", "stream", "events", "deadline_s",
                 "timer_at", "phase_started_s", "last_send_s", "is_closed", "is_lingering",
                 "is_write_shut", "in_ready")

    def __init__(self, sock, listener: ListenerState, http: Connection, now_s: float):
        self.sock, self.listener, self.http = sock, listener, http
        self.outbuf = bytearray()
        self.stream = None
        self.events = 0
        self.deadline_s: float | None = None
        self.timer_at: float | None = None
        self.phase_started_s = now_s       # when the current wait (idle / head / body) began
        self.last_send_s = now_s
        self.is_closed = self.is_lingering = self.is_write_shut = False
        self.in_ready = False


def connection_deadline(conn: "ConnState", limits: HttpLimits) -> float | None:
    """When the loop must next look at `conn` by itself (None: only on I/O or a wake)."""
    http = conn.http
    if conn.is_lingering:
        deadline = conn.phase_started_s + limits.linger_s
    elif conn.stream is not None:             # a stream over its buffer waits for writable
        is_blocked = len(conn.outbuf) > limits.max_send_buffer_bytes
        deadline = None if is_blocked else stream_deadline(conn)
    elif http.has_partial_request:
        timeout_s = limits.body_timeout_s if http.state == BODY else limits.header_timeout_s
        deadline = conn.phase_started_s + timeout_s
    elif http.state == IDLE and not conn.outbuf:
        deadline = conn.phase_started_s + limits.idle_timeout_s
    else:
        deadline = None
    if conn.outbuf:
        send_deadline = conn.last_send_s + limits.send_timeout_s
        deadline = send_deadline if deadline is None else min(deadline, send_deadline)
    return deadline


@dataclass
class StallMeter:
    """The longest time one loop iteration spent in its callbacks, since start: wall time
    (what a waiting client sees, waits for the GIL or a CPU included) and the loop thread's
    own CPU time (the work done on it). Written by the loop thread, read by apps."""
    max_s: float = 0.0
    max_cpu_s: float = 0.0

    def note(self, wall_s: float, cpu_s: float) -> None:
        self.max_s = max(self.max_s, wall_s)
        self.max_cpu_s = max(self.max_cpu_s, cpu_s)


def select_timeout(now_s: float, *due_s: float | None) -> float | None:
    """How long select may sleep: until the nearest of the deadlines (None: no deadline)."""
    candidates = [t for t in due_s if t is not None]
    return max(0.0, min(candidates) - now_s) if candidates else None


def wants_read(conn: ConnState, limits: HttpLimits) -> bool:
    """Keep reading while a request is being parsed, while lingering (to see the close), and
    while pipelined input stays under its bound; a stream's socket stays readable, so a
    client that goes away is noticed at once. An upload whose sink is full waits (the
    sinks wake the loop when it has room)."""
    http = conn.http
    if http.is_body_paused:
        return False
    is_parsing = http.state in (IDLE, BODY)
    return not http.is_eof and (is_parsing or conn.is_lingering
                                or http.buffered_bytes <= limits.max_pipelined_bytes)


class TimerHeap:
    """(when, seq, conn) entries; a connection's `timer_at` names its one live entry."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, ConnState]] = []
        self._seq = 0

    def next_due_s(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def arm(self, conn: ConnState, deadline: float | None) -> None:
        """Record `conn`'s deadline; push an entry only if it is earlier than the live one."""
        conn.deadline_s = deadline
        if deadline is not None and (conn.timer_at is None or deadline < conn.timer_at):
            self._seq += 1
            heapq.heappush(self._heap, (deadline, self._seq, conn))
            conn.timer_at = deadline

    def due(self, now: float) -> Iterator[ConnState]:
        """Yield each connection whose deadline has come (lazily: a handler may close a later one)."""
        heap, entries = self._heap, []
        while heap and heap[0][0] <= now:              # collect first: handlers may re-arm
            entries.append(heapq.heappop(heap))
        for when, _, conn in entries:
            if conn.is_closed or conn.timer_at != when:
                continue                               # superseded by an earlier entry
            conn.timer_at = None
            if conn.deadline_s is not None and conn.deadline_s > now:
                self.arm(conn, conn.deadline_s)        # moved later: re-arm, nothing due
                continue
            yield conn


@dataclass
class Drain:
    """The drain (docs/CONTRACT.md): first SIGTERM or `request_drain()` drains, a second one (or
    `stop()`) stops at once. The flags may be set from any thread or a signal handler; only
    the loop thread begins the drain and asks whether it is done."""
    timeout_s: float
    is_requested: bool = False
    is_stop_requested: bool = False
    deadline_s: float | None = None           # set when the loop begins the drain

    @property
    def is_draining(self) -> bool:
        return self.deadline_s is not None

    def on_signal(self) -> None:
        """Signal context: flip flags only, the loop does the work."""
        if self.is_requested:
            self.is_stop_requested = True
        self.is_requested = True

    def begin(self, now_s: float) -> None:
        self.deadline_s = now_s + self.timeout_s

    def is_done(self, conns: set[ConnState], now_s: float) -> bool:
        """No stream or unsent response of a draining listener is left, or time is up."""
        num_busy = sum(1 for c in conns if c.listener.spec.closes_on_drain
                       and (c.stream is not None or c.outbuf))
        if num_busy and now_s >= self.deadline_s:
            log.warning("drain timeout: cancelling %d open responses", num_busy)
            return True
        return num_busy == 0


def stream_deadline(conn: ConnState) -> float | None:
    try:
        return conn.stream.next_deadline_s()
    except Exception:
        log.exception("stream.next_deadline_s failed")
        return None


def stream_has_output(stream: Stream) -> bool:
    """Whether a wake should poll `stream`; one that cannot say is polled (its poll reports
    the failure the usual way)."""
    try:
        return stream.has_output()
    except Exception:
        log.exception("stream.has_output failed")
        return True


def cancel_stream(stream: Stream) -> None:
    """The client went away or the stream failed: a failing cancel must not stop the loop."""
    try:
        stream.cancel()
    except Exception:
        log.exception("stream.cancel failed")
