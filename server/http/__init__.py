"""HTTP transport: sockets, bytes and HTTP/1.1 framing; no OpenAI meaning.

    loop.py       the selectors loop: the ONE module that calls socket/select, and its HTTP
                  decisions: answer in order, poll streams, fail, time out; drain
    connstate.py  per-connection state, deadlines, the timer heap, drain bookkeeping
    signals.py    SIGTERM/SIGINT wired to the loop's wake-up socket
    http11.py     sans-IO HTTP/1.1: bytes -> Request / HttpError events; responses -> bytes
    head.py       the request head's RFC 9112 rules (request line, fields, framing)
    bodies.py     the body readers, one per framing (none, Content-Length, chunked)
    limits.py     the named HTTP limits (header bytes, body bytes, timeouts)
    protocol.py   the seam to the application: Request, Response, Stream, App

The application (server/api/app.py and its helpers) hands this package `App` objects; this
package never imports the application: errors it finds (bad framing, an App that raised)
are rendered by the App (`App.error`). It knows no JSON.
"""
