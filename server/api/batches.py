"""OpenAI's Batch API: `POST /v1/batches`, `GET /v1/batches`, `GET /v1/batches/{batch_id}`,
`POST /v1/batches/{batch_id}/cancel`.

The handlers read the request; the `BatchBackend` (server/batch/backend.py behind it)
checks the fields, stores the batch and tells the worker, which runs it on its own thread.
The list is newest first, paged by `after` (a batch id) and `limit` (1..100, default 20),
as OpenAI's.
"""
from __future__ import annotations

from urllib.parse import parse_qs

from server import replies
from server.api.fields import load_json_object
from server.api.files import batch_api, page, page_limit
from server.api.launch import ApiContext
from server.door.routes import Params
from server.http.protocol import Request, Response
from server.replies import Headers

DEFAULT_LIMIT, MAX_LIMIT = 20, 100


def create_batch(ctx: ApiContext, request: Request, params: Params,
                 extra: Headers) -> Response:
    api = batch_api(ctx)
    doc = load_json_object(request.body)
    return replies.json_response(200, api.create(
        doc.get("input_file_id"), doc.get("endpoint"), doc.get("completion_window"),
        doc.get("metadata")))


def retrieve_batch(ctx: ApiContext, request: Request, params: Params,
                   extra: Headers) -> Response:
    return replies.json_response(200, batch_api(ctx).batch(params["batch_id"]))


def list_batches(ctx: ApiContext, request: Request, params: Params,
                 extra: Headers) -> Response:
    query = parse_qs(request.query)
    limit = page_limit(query, DEFAULT_LIMIT, MAX_LIMIT)
    return replies.json_response(200, page(batch_api(ctx).batches(),
                                           query.get("after", [None])[0], limit))


def cancel_batch(ctx: ApiContext, request: Request, params: Params,
                 extra: Headers) -> Response:
    return replies.json_response(200, batch_api(ctx).cancel(params["batch_id"]))

