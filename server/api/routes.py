"""The OpenAI listener's route table: one row per route, read by everything that lists paths.

    method  path pattern            name (metrics label)  handler           off the loop?
    POST    /v1/chat/completions    chat                  chat/             yes
    POST    /v1/messages            messages              messages/         yes (Anthropic's)
    GET     /v1/models/{model}      model                 models.model      no
    GET     /static/{name}          static                a page file       no

`ApiApp` (app.py) routes with it and answers 404 / 405 (+ `Allow`) from it
(`server.door.routes.resolve`), counts each request under the row's name, and runs a row
marked `off_loop` on the off-loop pool (server/offloop/pool.py): the rows that parse,
render a template, tokenize or compile a grammar, so the loop thread never blocks on them.
serve.py hands the same table to the door's `LoadingApp`, which answers from it while the
models load; tests/server/api/test_openapi.py checks openapi.yaml against it.

A handler is `(ctx, request, params, extra headers) -> Response | Stream`: the whole answer
(`/v1/models`, `/v1/tokenize`), or the stream of work it has started (a generation, admitted
by the handler: 429 raised there when the queue is full); an `ApiError` it raises becomes the
error document. A row may instead name a `WebFile`: a page served from server/observe/web/.
"""
from __future__ import annotations

from typing import Callable, Union

from server.api.batches import cancel_batch, create_batch, list_batches, retrieve_batch
from server.api.chat import chat
from server.api.files import delete_file, file_content, list_files, retrieve_file, upload
from server.api.completions import completions
from server.api.embeddings import embeddings
from server.api.messages import count_tokens, messages
from server.api.launch import (TASK_EMBED, TASK_GENERATE, TASK_RERANK, TASK_SCORE,
                               TASK_TOKENIZE, ApiContext)
from server.api.lora_admin import load_lora_adapter, unload_lora_adapter
from server.api.models import model, models
from server.api.rerank import rerank, score
from server.api.responses import responses
from server.api.tokenize import detokenize, tokenize
from server.door.routes import LIVENESS, Params, Route, health_ok
from server.http.protocol import Request, Response, Stream
from server.observe.static import CHAT_PAGE, FAVICON, WebFile
from server.replies import Headers

Handler = Callable[[ApiContext, Request, Params, Headers], Response | Stream]
ApiHandler = Union[Handler, WebFile]


def healthz(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    """Liveness on the API port too (the health port's `/healthz` also checks the engines)."""
    return health_ok()


API_ROUTES: tuple[Route[ApiHandler], ...] = (
    Route("POST", "/v1/chat/completions", "chat", chat, off_loop=True),
    Route("POST", "/v1/completions", "completions", completions, off_loop=True),
    Route("POST", "/v1/responses", "responses", responses, off_loop=True),   # stateless
    Route("POST", "/v1/messages", "messages", messages, off_loop=True),      # Anthropic's API
    Route("POST", "/v1/messages/count_tokens", "count_tokens", count_tokens, off_loop=True),
    Route("POST", "/v1/embeddings", "embeddings", embeddings, off_loop=True),
    Route("POST", "/v1/rerank", "rerank", rerank, off_loop=True),    # bi-encoder scoring
    Route("POST", "/v1/score", "score", score, off_loop=True),
    Route("POST", "/v1/tokenize", "tokenize", tokenize, off_loop=True),
    Route("POST", "/v1/detokenize", "detokenize", detokenize),
    Route("GET", "/v1/models", "models", models),
    Route("GET", "/v1/models/{model}", "model", model),
    Route("POST", "/v1/load_lora_adapter", "load_lora_adapter", load_lora_adapter,
          off_loop=True),                                # reads an adapter folder: a pool thread
    Route("POST", "/v1/unload_lora_adapter", "unload_lora_adapter", unload_lora_adapter),
    # the Batch API (files and batches under [batch].dir; 404 batch_api_disabled without it):
    # the rows that write or read the disk are off the loop, the ones that read memory not
    Route("POST", "/v1/files", "file_upload", upload, off_loop=True),
    Route("GET", "/v1/files", "files", list_files),
    Route("GET", "/v1/files/{file_id}/content", "file_content", file_content, off_loop=True),
    Route("GET", "/v1/files/{file_id}", "file", retrieve_file),
    Route("DELETE", "/v1/files/{file_id}", "file_delete", delete_file, off_loop=True),
    Route("POST", "/v1/batches", "batch_create", create_batch, off_loop=True),
    Route("GET", "/v1/batches", "batches", list_batches),
    Route("GET", "/v1/batches/{batch_id}", "batch", retrieve_batch),
    Route("POST", "/v1/batches/{batch_id}/cancel", "batch_cancel", cancel_batch,
          off_loop=True),
    Route("GET", "/healthz", LIVENESS, healthz),
    Route("GET", "/health", LIVENESS, healthz),          # the same, as vLLM and llm-d name it
    Route("GET", "/", "page", WebFile(CHAT_PAGE)),       # the chat page
    Route("GET", "/static/{name}", "static", WebFile(param="name")),
    Route("GET", "/favicon.ico", "favicon", WebFile(FAVICON)),   # browsers ask unprompted
)

# The rows that serve each task a model may or may not do (`ApiContext.check_model`): its
# 400 names their paths, read from the table.
TASK_ROWS = {TASK_GENERATE: ("chat", "completions", "responses", "messages"), TASK_EMBED: ("embeddings",),
             TASK_TOKENIZE: ("tokenize", "detokenize"), TASK_RERANK: ("rerank",),
             TASK_SCORE: ("score",)}


def task_paths(table: tuple[Route, ...] = API_ROUTES) -> dict[str, str]:
    """Each task's paths as an error names them ("/v1/tokenize and /v1/detokenize")."""
    pattern = {row.name: row.pattern for row in table}
    out = {}
    for task, names in TASK_ROWS.items():
        paths = [pattern[name] for name in names]
        out[task] = paths[0] if len(paths) == 1 else ", ".join(paths[:-1]) + " and " + paths[-1]
    return out
