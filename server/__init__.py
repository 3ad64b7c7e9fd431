"""The v1 server: the only package that knows sockets, HTTP and OpenAI JSON.

Transport: `loop.py` (selectors, the one module doing socket I/O), `connstate.py` and
`signals.py` (its socket-free bookkeeping), `http11.py` (sans-IO), `protocol.py` (the seam).
Application: `routes.py`, `openai.py` (validation), `app.py` (the two Apps), `bridge.py`
(the engine thread and the one admission queue), `streams.py` (a generation as text unit,
renderer and shell; embeddings), `documents.py` (response documents). Shared: `errors.py`
(the one status table), `metrics.py`, `config.py`; `serve.py` starts it all.

A `stream: true` chat, in reading order: loop.py -> http11.py -> app.py -> openai.py ->
template/chat.py -> the engine tokenizer -> bridge.py -> engine/core/engine.py ->
streams.py -> sse/textstream.py -> sse/framing.py -> back to loop.py.
"""
