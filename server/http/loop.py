"""The selectors loop: the ONLY code in tl-serve that calls socket, accept, recv, send, select.

One thread runs `EventLoop.run()`. It blocks in `select(timeout=nearest deadline)` and wakes
for exactly four reasons: a socket is ready, a timer is due, another thread called `wake()`
(the engine finished a step, an upload's disk writer made room) or a signal arrived
(`signal.set_wakeup_fd` writes to the same wake-up socketpair). It never polls: thousands
of idle keep-alive connections cost nothing but their file descriptors and one timer each.

Per connection the loop only moves bytes: `server/http/http11.Connection` turns them into
`Request`s and turns `Response`s / stream chunks back into bytes. The application (`App`)
answers a Request with a `Response` (sent at once) or a `Stream` (polled on a wake when it
has output, and at its own deadline, until done). While a stream is active the socket
stays registered for reading, so a client that goes away is noticed at once and the stream
is `cancel()`ed — not at the next token write (the trap of servers that only notice on
write).

Bounds (`server/http/limits.py`): a stream whose client does not read is not polled while its
send buffer is over `max_send_buffer_bytes`, and is dropped after `send_timeout_s` without
progress; pipelined input is held up to `max_pipelined_bytes`; an upload whose sink is full
(its pieces wait for the disk) is not read until the sink wakes the loop; a framing error is
answered, then the connection half-closes and lingers briefly so the client reads the error.

Drain (first SIGTERM or `request_drain()`): close the listeners marked `closes_on_drain`,
call `on_drain()` once, keep serving open connections and the health listener, and return
from `run()` when no stream or unsent response of a draining listener is left, or after
`drain_timeout_s` (the rest are cancelled). A second signal (or `stop()`) returns at once.

A wake polls only the streams that say they have something to hand over
(`Stream.has_output`): with many streams open, a wake for one of them costs one poll, not
one per stream. A stream is also polled at its own deadline and when its socket drains.

The socket-free bookkeeping — each connection's deadline, the timer heap, what to read,
the drain's flags — lives in `server/http/connstate.py`. `stall` (a `StallMeter`): the
longest one iteration spent in its callbacks (select's return to the next select), wall
and CPU, since start: how well the app keeps "never block".

Size: one concept, over the 400-line default. The socket work (accept, recv, send,
register, close) and the HTTP decisions it serves (answer requests in order, poll a
stream, answer a framing error, act on a due timer) call each other on every event: a
request read leads to an answer sent, a send that drains leads to the next poll, a due
timer to a close. Split in two files, each half reached into the other's state; here one
class reads top to bottom as one connection's life.
"""
from __future__ import annotations

import logging
import selectors
import socket
import time
from typing import Callable

from server.http.connstate import (BindError, ConnState, Drain, Listener, ListenerState, TimerHeap,
                                   cancel_stream, connection_deadline, parse_address,
                                   StallMeter, select_timeout, stream_has_output, wants_read)
from server.http.http11 import (CLOSING, HANDLING, IDLE, NEED_DATA, PAUSED, Connection,
                                HttpError, Interim)
from server.http.limits import HttpLimits
from server.http.protocol import AppFailure, Request, Response
from server.http.signals import install_stop_signals

log = logging.getLogger("tlserve.http")

RECV_BYTES = 64 * 1024          # one recv; big enough for a pipelined burst or a body chunk
LISTEN_BACKLOG = 1024
# accept() failing (EMFILE: out of file descriptors) leaves the listener readable: retrying
# at once would spin. Pause accepting for this long, or until a connection closes.
ACCEPT_RETRY_S = 0.5
INTERNAL_ERROR = "internal_error"     # the error kind an App renders when it raised itself


def _bind(address: str) -> socket.socket:
    host, port = parse_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if host and not host.replace(".", "").isdigit() and family == socket.AF_INET:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, host = infos[0][0], infos[0][4][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise BindError(address, exc) from None
    return sock


class EventLoop:
    """Serves `listeners` until drained or stopped. Only `wake`, `request_drain` and `stop`
    may be called from other threads (or signal handlers)."""

    def __init__(self, listeners: list[Listener], *, limits: HttpLimits = HttpLimits(),
                 handle_signals: bool = False, drain_timeout_s: float = 30.0,
                 on_drain: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.limits, self._clock = limits, clock
        self._handle_signals, self._on_drain = handle_signals, on_drain
        # Plain state first, sockets last: a bind that fails can then close what exists.
        self._listeners: dict[str, ListenerState] = {}
        self._conns: set[ConnState] = set()
        self._streaming: set[ConnState] = set()   # conns with an active Stream
        self._ready: list[ConnState] = []         # conns with buffered requests left to answer
        self._paused_bodies: set[ConnState] = set()   # uploads waiting for their sink's room
        self._timers = TimerHeap()
        self._drain = Drain(timeout_s=drain_timeout_s)
        self._wake_pending = False
        self._accept_retry_s: float | None = None   # when paused listeners try again
        self.stall = StallMeter()   # the longest iteration's callbacks; written here, read by apps
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        for sock in (self._wake_r, self._wake_w):
            sock.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            for spec in listeners:
                state = ListenerState(spec, _bind(spec.address))
                self._listeners[spec.name] = state
                self._selector.register(state.sock, selectors.EVENT_READ, state)
        except BaseException:
            self._close_all()
            raise
        for spec in listeners:
            if spec.sinks is not None:
                spec.sinks.attach(self.wake)           # a full sink with room again wakes us

    # ---- thread-safe controls ---------------------------------------------------------

    def bound_address(self, name: str) -> tuple[str, int]:
        host, port = self._listeners[name].sock.getsockname()[:2]
        return host, port

    def wake(self) -> None:
        """Make run() poll the active streams that have output, soon. Cheap and safe from
        any thread."""
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            self._wake_w.send(b"\0")
        except OSError:          # buffer full (a wake is pending anyway) or loop closed
            pass

    def request_drain(self) -> None:
        self._drain.is_requested = True
        self._poke()

    def stop(self) -> None:
        self._drain.is_stop_requested = True
        self._poke()

    def _poke(self) -> None:
        try:
            self._wake_w.send(b"\1")
        except OSError:
            pass

    # ---- the loop ---------------------------------------------------------------------

    def run(self) -> None:
        """Serve until drained or stopped; always closes every socket on the way out."""
        restore = (install_stop_signals(self._wake_w.fileno(), self._drain.on_signal)
                   if self._handle_signals else lambda: None)
        try:
            while not self._drain.is_stop_requested:
                now = self._clock()
                if self._drain.is_requested and not self._drain.is_draining:
                    self._begin_drain(now)
                if self._drain.is_draining and self._drain.is_done(self._conns, now):
                    break
                ready = self._selector.select(self._select_timeout(now))
                started_s, started_cpu_s = self._clock(), time.thread_time()
                for key, mask in ready:
                    self._dispatch(key.data, mask)
                now = self._clock()
                self._run_timers(now)
                self._answer_ready()
                if self._accept_retry_s is not None and now >= self._accept_retry_s:
                    self._resume_accepting()
                self.stall.note(self._clock() - started_s, time.thread_time() - started_cpu_s)
        finally:
            restore()
            self._close_all()

    def _dispatch(self, target, mask: int) -> None:
        if target is None:
            self._on_wake()
        elif isinstance(target, ListenerState):
            self._accept(target)
        elif not target.is_closed:
            if mask & selectors.EVENT_WRITE:
                self._on_writable(target)
            if mask & selectors.EVENT_READ and not target.is_closed:
                self._on_readable(target)

    def _select_timeout(self, now: float) -> float | None:
        return 0.0 if self._ready else select_timeout(
            now, self._timers.next_due_s(), self._drain.deadline_s, self._accept_retry_s)

    # ---- drain ------------------------------------------------------------------------

    def _begin_drain(self, now: float) -> None:
        self._drain.begin(now)
        for state in self._listeners.values():
            if state.spec.closes_on_drain and not state.is_closed:
                self._close_listener(state)
        for conn in self._conns:       # their next responses say Connection: close
            if conn.listener.spec.closes_on_drain:
                conn.http.request_close()
        log.info("draining: API listener closed, waiting for %d streams", len(self._streaming))
        if self._on_drain is not None:
            try:
                self._on_drain()
            except Exception:
                log.exception("on_drain failed")

    # ---- accept / read / write --------------------------------------------------------

    def _accept(self, state: ListenerState) -> None:
        for _ in range(self.limits.max_accepts_per_wakeup):
            if state.num_connections >= self.limits.max_connections:
                self._set_accepting(state, False)
                return
            try:
                sock, addr = state.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:                 # EMFILE and friends: try again later
                log.warning("accept on %s failed: %s", state.spec.name, exc)
                self._set_accepting(state, False)
                self._accept_retry_s = self._clock() + ACCEPT_RETRY_S
                return
            sock.setblocking(False)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            now = self._clock()
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            conn = ConnState(sock, state, Connection(limits=self.limits, peer=peer,
                                                     sinks=state.spec.sinks), now)
            state.num_connections += 1
            self._conns.add(conn)
            if self._drain.is_draining and state.spec.closes_on_drain:
                conn.http.request_close()
            self._update(conn)

    def _set_accepting(self, state: ListenerState, is_accepting: bool) -> None:
        if state.is_closed or state.is_accepting == is_accepting:
            return
        state.is_accepting = is_accepting
        if is_accepting:
            self._selector.register(state.sock, selectors.EVENT_READ, state)
        else:
            self._selector.unregister(state.sock)

    def _on_readable(self, conn: ConnState) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = None                                 # reset: the client is gone
        if conn.is_lingering:                            # discarding input after an error
            if not data:
                self._close(conn)
            return
        if not data:
            if conn.stream is not None or data is None:
                self._close(conn)                       # disconnect: cancel at once
                return
            conn.http.receive_data(b"")
            if conn.http.state == IDLE and not conn.http.buffered_bytes:
                self._close(conn)                      # a clean close between requests
                return
        else:
            if conn.http.state == IDLE and conn.http.buffered_bytes == 0:
                conn.phase_started_s = self._clock()   # a new request starts arriving
            conn.http.receive_data(data)
        self._answer(conn)

    def _on_writable(self, conn: ConnState) -> None:
        self._flush(conn)
        if conn.is_closed:
            return
        if conn.stream is not None and len(conn.outbuf) <= self.limits.max_send_buffer_bytes:
            self._poll_stream(conn, self._clock())    # backpressure released
        elif not conn.outbuf and conn.stream is None:
            self._answer(conn)                          # pipelined requests may be waiting
        else:
            self._update(conn)

    def _send(self, conn: ConnState, data: bytes) -> None:
        if data:
            is_fresh = not conn.outbuf
            conn.outbuf += data
            self._flush(conn, is_fresh)

    def _flush(self, conn: ConnState, is_fresh: bool = False) -> None:
        if not conn.outbuf or conn.is_closed:
            return
        try:
            sent = conn.sock.send(conn.outbuf)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn)                          # reset or broken pipe: client gone
            return
        del conn.outbuf[:sent]
        if conn.outbuf and (sent or is_fresh):         # the send timeout counts from here
            conn.last_send_s = self._clock()

    def _on_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        # Order matters: empty the socket, THEN clear the flag, THEN poll. A wake() racing
        # with us either sees the flag still set (and its events are found by the poll
        # below) or sees it clear and writes a fresh byte. Clearing before emptying could
        # swallow that byte with the flag left set: every later wake() would be dropped.
        self._wake_pending = False
        for conn in list(self._paused_bodies):
            if not conn.http.is_body_paused:        # (a closed one left the set in _close)
                self._paused_bodies.discard(conn)
                self._update(conn)                     # its sink has room: read on
        now = self._clock()
        for conn in list(self._streaming):
            if (conn.stream is not None and not conn.is_closed
                    and stream_has_output(conn.stream)):
                self._poll_stream(conn, now)

    # ---- requests and streams: what the loop does with a connection's parsed input -----

    def _answer(self, conn: ConnState) -> None:
        """Answer buffered requests in order until one needs more bytes or time."""
        for _ in range(self.limits.max_pipelined_requests):
            if conn.is_closed:
                break
            if len(conn.outbuf) > self.limits.max_send_buffer_bytes:
                break                                   # the client is not reading: wait
            event = conn.http.next_event()
            if event is NEED_DATA:
                break                                   # _on_readable comes back with more
            if event is PAUSED:
                break                                   # a stream's end comes back (_answer_soon)
            if isinstance(event, HttpError):
                self._fail(conn, event)
                break
            if isinstance(event, Interim):
                self._send(conn, event.data)
                continue
            self._handle(conn, event)
        else:
            self._answer_soon(conn)                    # more may be buffered: others first
        self._update(conn)

    def _answer_soon(self, conn: ConnState) -> None:
        """Answer `conn`'s buffered requests in the next loop iteration (select timeout 0)."""
        if not conn.in_ready and conn.http.buffered_bytes:
            conn.in_ready = True
            self._ready.append(conn)

    def _answer_ready(self) -> None:
        ready, self._ready = self._ready, []
        for conn in ready:
            conn.in_ready = False
            if not conn.is_closed:
                self._answer(conn)

    def _handle(self, conn: ConnState, request: Request) -> None:
        try:
            result = conn.listener.spec.app.handle(request)
        except Exception as exc:
            if not isinstance(exc, AppFailure):         # AppFailure: already logged
                log.exception("app.handle failed for %s %s", request.method, request.path)
            result = conn.listener.spec.app.error(INTERNAL_ERROR, "Internal server error.",
                                                  request.path)
        if isinstance(result, Response):
            self._send(conn, conn.http.send_response(result))
            conn.phase_started_s = self._clock()
            return
        conn.stream = result
        self._streaming.add(conn)
        self._poll_stream(conn, self._clock())

    def _poll_stream(self, conn: ConnState, now: float) -> None:
        stream = conn.stream
        if len(conn.outbuf) > self.limits.max_send_buffer_bytes:
            return self._update(conn)            # backpressure: resumes when writable
        try:
            poll = stream.poll(now)
            if poll.successor is not None:               # a stand-in's answer, now polled itself
                conn.stream = poll.successor
            self._send(conn, conn.http.send_poll(poll))  # one write per poll: one packet
        except Exception as exc:
            if not isinstance(exc, AppFailure):         # AppFailure: already logged
                log.exception("stream poll failed")
            return self._stream_failed(conn, now)
        if conn.is_closed:
            return
        if poll.done:
            self._end_stream(conn)
            conn.phase_started_s = now
            self._answer_soon(conn)                    # a pipelined request may be waiting
        self._update(conn)

    def _stream_failed(self, conn: ConnState, now: float) -> None:
        stream, head_sent = conn.stream, conn.http.state != HANDLING
        self._end_stream(conn)
        cancel_stream(stream)
        if head_sent or conn.is_closed:
            self._close(conn)                          # mid-body: only a close can tell
            return
        response = conn.listener.spec.app.error(INTERNAL_ERROR, "Internal server error.")
        self._send(conn, conn.http.send_response(response))
        self._answer_soon(conn)
        self._update(conn)

    def _end_stream(self, conn: ConnState) -> None:
        conn.stream = None
        self._streaming.discard(conn)

    def _fail(self, conn: ConnState, err: HttpError) -> None:
        """Answer a framing error, then stop reading requests and close (RFC 9112 9.6)."""
        log.info("%s from %s: %s", err.kind, conn.http.peer, err.message)
        response = conn.listener.spec.app.error(err.kind, err.message, err.path)
        self._send(conn, conn.http.send_error(response))
        self._linger(conn)

    def _linger(self, conn: ConnState) -> None:
        if conn.is_closed:
            return
        conn.is_lingering = True
        conn.phase_started_s = self._clock()
        self._update(conn)

    # ---- timers -----------------------------------------------------------------------

    def _run_timers(self, now: float) -> None:
        for conn in self._timers.due(now):
            self._on_timer(conn, now)

    def _on_timer(self, conn: ConnState, now: float) -> None:
        limits, http = self.limits, conn.http
        if conn.is_lingering:
            return self._close(conn)
        if conn.outbuf and now >= conn.last_send_s + limits.send_timeout_s:
            log.info("send timeout for %s", http.peer)
            return self._close(conn)                   # the client stopped reading
        if conn.stream is not None:
            return self._poll_stream(conn, now)
        if http.has_partial_request:
            return self._fail(conn, HttpError("request_timeout", "request not received in time",
                                              http.pending_path))
        if http.state == IDLE and not conn.outbuf:
            return self._close(conn)                   # keep-alive idle timeout: silently
        self._update(conn)

    def _update(self, conn: ConnState) -> None:
        """Re-register interest and re-arm the timer after anything happened to `conn`."""
        if conn.is_closed:
            return
        http = conn.http
        if not conn.outbuf:
            if conn.is_lingering and http.is_eof:
                return self._close(conn)               # nothing more will come either way
            if conn.is_lingering and not conn.is_write_shut:
                conn.is_write_shut = True
                self._shutdown_write(conn)             # the client sees the end of our answer
            if http.state == CLOSING and not conn.is_lingering:
                return self._linger(conn)              # response done, connection ends
            if http.is_eof and http.state == IDLE and not http.buffered_bytes:
                return self._close(conn)               # half-closed client, all answered
        events = selectors.EVENT_WRITE if conn.outbuf else 0
        if wants_read(conn, self.limits):
            events |= selectors.EVENT_READ
        elif http.is_body_paused:
            self._paused_bodies.add(conn)              # a wake looks at it again
        if events != conn.events:
            if conn.events == 0:
                self._selector.register(conn.sock, events, conn)
            elif events == 0:
                self._selector.unregister(conn.sock)
            else:
                self._selector.modify(conn.sock, events, conn)
            conn.events = events
        self._timers.arm(conn, connection_deadline(conn, self.limits))

    # ---- closing ----------------------------------------------------------------------

    def _shutdown_write(self, conn: ConnState) -> None:
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _close(self, conn: ConnState) -> None:
        if conn.is_closed:
            return
        conn.is_closed = True
        conn.http.abandon()                  # an upload cut off mid-body: its file goes
        if conn.stream is not None:
            stream = conn.stream
            self._end_stream(conn)
            cancel_stream(stream)
        if conn.events:
            self._selector.unregister(conn.sock)
        conn.sock.close()
        self._conns.discard(conn)
        self._paused_bodies.discard(conn)
        conn.listener.num_connections -= 1
        self._resume_accepting()

    def _resume_accepting(self) -> None:
        """Listeners paused at max_connections or by a failed accept try again."""
        self._accept_retry_s = None
        for state in self._listeners.values():
            if not state.is_accepting and state.num_connections < self.limits.max_connections:
                self._set_accepting(state, True)

    def _close_listener(self, state: ListenerState) -> None:
        if state.is_accepting:
            self._selector.unregister(state.sock)
        state.is_accepting, state.is_closed = False, True
        state.sock.close()

    def _close_all(self) -> None:
        for conn in list(self._conns):
            self._close(conn)
        for state in self._listeners.values():
            if not state.is_closed:
                self._close_listener(state)
        for state in self._listeners.values():
            if state.spec.sinks is not None:
                state.spec.sinks.close()               # what was given to the disk lands
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
