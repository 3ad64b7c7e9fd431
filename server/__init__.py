"""The v1 server: the only package that knows sockets, HTTP and OpenAI JSON, in rooms.

    http/     the transport: `loop.py` (selectors, the one module doing socket I/O),
              `cycle.py`, `connstate.py`, `signals.py`, `http11.py` (sans-IO), `head.py`,
              `limits.py`, `protocol.py` (the seam to the application)
    door/     what every API route passes first: request id, API key, CORS, access log,
              the route table (`routes.py`), the loading state
    api/      the OpenAI API, one module or package per endpoint family; `app.py` the
              dispatcher, `launch.py` a generation's launch, `streams.py` the stream shell
    offloop/  work off the loop thread: `pool.py`'s threads for heavy preparation and big
              documents, and the stream that stands for their work on the loop
    text/     between JSON and token ids: the served model, typed messages, detokenising,
              tool-call formats, the thinking split
    worker/   the engine thread and its one admission queue (`bridge.py`), an encoder
              model's own thread (`encoder_thread.py`), the compute turn
    observe/  metrics, the step trace, the engine view, the health port, the web pages

Shared at the top: `errors.py` (the one status table), `replies.py` (`json_bytes`, the one
JSON encoding), `state.py`, `config.py`, `model_table.py`, `loading.py`; `serve.py` starts it.

The walk of one `stream: true` chat, file by file, is in docs/ARCHITECTURE.md.
"""
