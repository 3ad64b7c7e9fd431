"""The v1 server: the only package that knows sockets, HTTP and OpenAI JSON, in rooms.

    http/     the transport: `loop.py` (selectors, the one module doing socket I/O),
              `connstate.py`, `signals.py`, `http11.py` (sans-IO), `head.py`, `bodies.py`,
              `limits.py`, `protocol.py` (the seam to the application)
    door/     what every API route passes first: request id, API key, CORS, access log,
              the router (`routes.py`), the loading state
    api/      the OpenAI API, one module or package per endpoint family; `routes.py` the
              route table, `app.py` the dispatcher, `launch.py` what the generation
              handlers share (up to `client.generate`), `streams.py` the stream shell
    offloop/  work off the loop thread: `pool.py`'s threads for heavy preparation and big
              documents, and the stream that stands for their work on the loop
    text/     between JSON and token ids: the served model, typed messages, detokenising,
              tool-call formats, the thinking split; `client.py` the engine client of a
              chat model and the `Generation` it returns
    worker/   the engine thread (`bridge.py`), its tickets and commands (`tickets.py`),
              its one admission queue (`admission.py`), an encoder model's own thread
              (`encoder_thread.py`), the compute turn
    observe/  metrics, the step trace, the engine view, the health port, the web pages

Shared at the top: `errors.py` (the one status table), `replies.py` (`json_bytes`, the one
JSON encoding), `state.py`, `config.py`, `model_table.py`, `loading.py`; `serve.py` starts it.

The walk of one `stream: true` chat, file by file, is in docs/ARCHITECTURE.md.
"""
