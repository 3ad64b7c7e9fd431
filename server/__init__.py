"""The v1 server: the only package that knows sockets, HTTP and OpenAI JSON.

Transport: `loop.py` (selectors) + `http11.py` (sans-IO). Application: `routes.py`,
`openai.py` (validation), `documents.py` (response documents), `app.py` (the two Apps),
`streams.py` (generations and embeddings over time), `bridge.py` (the engine thread),
`admission.py`, `metrics.py`, `config.py`, `errors.py`; `serve.py` starts it all.
"""
