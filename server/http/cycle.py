"""What the loop does with a connection's parsed input: requests answered in order, streams
polled, framing errors answered, due timers decided. No socket is touched here.

`RequestCycle` is the half of `EventLoop` (server/http/loop.py) that holds the HTTP
decisions; the loop is the other half and the only code that calls socket or select. The
cycle moves bytes and interest only through the loop's three socket-side methods:

    _send(conn, data)   queue bytes and try to send them now
    _update(conn)       re-register the socket's interest and re-arm its timer
    _close(conn)        close the connection (a stream on it is cancelled)

and reads the loop's `limits`, `_clock`, `_ready` (connections with buffered requests left
to answer) and `_streaming` (connections with an active Stream).
"""
from __future__ import annotations

import logging

from server.http.connstate import ConnState, cancel_stream
from server.http.http11 import HANDLING, IDLE, NEED_DATA, PAUSED, HttpError, Interim
from server.http.protocol import AppFailure, Request, Response

log = logging.getLogger("tlserve.http")
INTERNAL_ERROR = "internal_error"     # the error kind an App renders when it raised itself


class RequestCycle:
    """Requests, responses, streams and timers of the loop's connections (a mixin of
    `EventLoop`: see the module docstring for what the loop provides)."""

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
            result = conn.listener.spec.app.error(INTERNAL_ERROR, "Internal server error.")
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
        self._send(conn, conn.http.send_error(conn.listener.spec.app.error(err.kind, err.message)))
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
            return self._fail(conn, HttpError("request_timeout", "request not received in time"))
        if http.state == IDLE and not conn.outbuf:
            return self._close(conn)                   # keep-alive idle timeout: silently
        self._update(conn)
