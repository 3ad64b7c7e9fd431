"""Every bound the HTTP transport enforces, each a named field with its reason and status.

A server that trusts its clients can be knocked over by one of them: a header that never
ends, a body of 10 GB, a connection that sends one byte a minute (slowloris), a client that
asks for a stream and never reads it. `HttpLimits` names each bound once; the sans-IO parser
(`server/http/http11.py`) and the loop (`server/http/loop.py`) read them from here. The statuses come
from the one table in `server/errors.py` (kinds in brackets below).

This module is values only: no I/O, no policy beyond the defaults.
"""
from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True, kw_only=True)
class HttpLimits:
    # Request line + header fields + the blank line. Past it: 431 [headers_too_large].
    # 16 KiB is what nginx's large_client_header_buffers and h11 allow by default.
    max_header_bytes: int = 16 * KIB
    # Header fields in one request (or trailer fields). Past it: 431 [headers_too_large].
    max_header_count: int = 100
    # A decoded request body (Content-Length or chunked). Past it: 413 [body_too_large].
    # A chat request with a long context is well under 1 MiB; 8 MiB leaves room for batches.
    max_body_bytes: int = 8 * MIB
    # One chunk-size line of a chunked body (size + extensions). Past it: 400 [malformed_http].
    max_chunk_line_bytes: int = 4 * KIB
    # From the first byte of a request to the end of its header block. Past it: 408
    # [request_timeout] then close: a slowloris client cannot hold a connection forever.
    header_timeout_s: float = 10.0
    # From the first byte of a request to the end of its body. Past it: 408 then close.
    # 8 MiB in 60 s needs ~140 KB/s from the client.
    body_timeout_s: float = 60.0
    # A keep-alive connection with no request in progress. Past it: closed silently
    # (RFC 9112 9.8: a server may close an idle connection at any time). 75 s is nginx's
    # keepalive_timeout default, longer than most client pools' idle timeouts.
    idle_timeout_s: float = 75.0
    # Bytes queued for a client without any of them being accepted by the socket. Past it:
    # the connection is closed (and its stream cancelled): the client stopped reading.
    send_timeout_s: float = 60.0
    # After an error response we stop reading requests, half-close and discard input for
    # at most this long, so the client reads the error before it sees a reset (RFC 9112 9.6).
    linger_s: float = 2.0
    # Open connections per listener. At the limit the listener stops accepting (the
    # kernel backlog holds newcomers) until one closes; the health listener counts apart.
    max_connections: int = 4096
    # Response bytes queued for one connection. Past it the loop stops polling that
    # connection's stream (and stops answering its pipelined requests) until the client
    # reads: a client that does not read cannot make the server's memory grow.
    max_send_buffer_bytes: int = 1 * MIB
    # Bytes of pipelined requests held while an earlier response is still being produced
    # (requests are parsed one at a time, in order). Past it the loop stops reading that
    # socket until the current response is finished.
    max_pipelined_bytes: int = 64 * KIB
    # Complete requests answered back to back from one connection's input before the loop
    # serves the other connections: fairness for the loop thread, not an error.
    max_pipelined_requests: int = 32
    # Connections accepted from one listener per readiness event (fairness again).
    max_accepts_per_wakeup: int = 64
