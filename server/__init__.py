"""The v1 server: the only package that knows sockets, HTTP and OpenAI JSON.

Transport, in `server/http/`: `loop.py` (selectors, the one module doing socket I/O),
`connstate.py` and `signals.py` (its socket-free bookkeeping), `http11.py` (sans-IO),
`limits.py`, `protocol.py` (the seam to the application).
Application, here: `routes.py`, `openai.py` (validation), `app.py` (the two Apps),
`bridge.py` (the engine thread and the one admission queue), `streams.py` (a generation as
text unit, renderer and shell; embeddings), `documents.py` (response documents).
Shared: `errors.py` (the one status table), `metrics.py`, `config.py`; `serve.py` starts it.

The walk of one `stream: true` chat, file by file, is in docs/ARCHITECTURE.md.
"""
