"""OpenAI's Batch API: `POST /v1/batches`, `GET /v1/batches`, `GET /v1/batches/{batch_id}`,
`POST /v1/batches/{batch_id}/cancel`.

Creating a batch checks its fields and stores it `validating`; the batch worker
(server/batch/worker.py) does the rest on its own thread. Cancelling marks it `cancelling`
and tells the worker, which stops submitting, lets what is in flight finish, and ends it
`cancelled` with what was answered so far in its output and error files. The list is
newest first, paged by `after` (a batch id) and `limit` (1..100, default 20), as OpenAI's.
"""
from __future__ import annotations

from urllib.parse import parse_qs

from server import replies
from server.api.fields import load_json_object
from server.api.files import batch_api
from server.api.launch import ApiContext
from server.batch.lines import BATCH_URLS
from server.batch.store import PURPOSE_BATCH, BatchRecord, stamped
from server.door.routes import Params
from server.errors import ApiError, bad
from server.http.protocol import Request, Response
from server.replies import Headers

COMPLETION_WINDOWS_S = {"24h": 24 * 3600}     # OpenAI's one window
MAX_METADATA_PAIRS, MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS = 16, 64, 512
DEFAULT_LIMIT, MAX_LIMIT = 20, 100


def create_batch(ctx: ApiContext, request: Request, params: Params,
                 extra: Headers) -> Response:
    api = batch_api(ctx)
    doc = load_json_object(request.body)
    input_file_id = doc.get("input_file_id")
    if not isinstance(input_file_id, str):
        raise bad("input_file_id", "input_file_id must be the id of an uploaded file.")
    source = api.store.file(input_file_id)
    if source is None:
        raise ApiError("file_not_found", f"No such file: {input_file_id!r}.",
                       param="input_file_id")
    if source.purpose != PURPOSE_BATCH:
        raise bad("input_file_id", f"The file {input_file_id} was not uploaded with "
                                   'purpose "batch".')
    endpoint = doc.get("endpoint")
    if endpoint not in BATCH_URLS:
        raise bad("endpoint", f"endpoint must be one of {', '.join(BATCH_URLS)}, "
                              f"got {endpoint!r}.")
    window = doc.get("completion_window")
    if window not in COMPLETION_WINDOWS_S:
        raise bad("completion_window", f'completion_window must be "24h", got {window!r}.')
    metadata = _metadata(doc.get("metadata"))
    now = api.store.now()
    record = api.store.new_batch(endpoint=endpoint, input_file_id=input_file_id,
                                 completion_window=window, metadata=metadata,
                                 expires_at=now + COMPLETION_WINDOWS_S[window])
    api.worker.notify()
    return replies.json_response(200, record.document())


def retrieve_batch(ctx: ApiContext, request: Request, params: Params,
                   extra: Headers) -> Response:
    return replies.json_response(200, _batch(ctx, params["batch_id"]).document())


def list_batches(ctx: ApiContext, request: Request, params: Params,
                 extra: Headers) -> Response:
    records = batch_api(ctx).store.batches()
    query = parse_qs(request.query)
    after = query.get("after", [None])[0]
    limit = _limit(query.get("limit", [str(DEFAULT_LIMIT)])[0])
    if after is not None:
        ids = [r.id for r in records]
        records = records[ids.index(after) + 1:] if after in ids else []
    page = [r.document() for r in records[:limit]]
    return replies.json_response(200, {
        "object": "list", "data": page, "has_more": len(records) > limit,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None})


def cancel_batch(ctx: ApiContext, request: Request, params: Params,
                 extra: Headers) -> Response:
    api = batch_api(ctx)
    record = _batch(ctx, params["batch_id"])

    def cancelling(current: BatchRecord) -> BatchRecord | None:
        if current.status in ("cancelling", "cancelled"):
            return None
        return stamped(current, "cancelling", api.store.now())

    if record.status not in ("validating", "in_progress", "cancelling", "cancelled"):
        raise ApiError("batch_not_cancellable", f"The batch {record.id} is {record.status}; "
                                                "only a batch still running can be cancelled.")
    record = api.store.update(record.id, cancelling) or record
    api.worker.cancel(record.id)
    return replies.json_response(200, record.document())


def _batch(ctx: ApiContext, batch_id: str) -> BatchRecord:
    record = batch_api(ctx).store.batch(batch_id)
    if record is None:
        raise ApiError("batch_not_found", f"No such batch: {batch_id!r}.", param="batch_id")
    return record


def _limit(text: str) -> int:
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise bad("limit", f"limit must be an integer in 1..{MAX_LIMIT}, got {text!r}.")
    return limit


def _metadata(value: object) -> dict | None:
    """OpenAI's metadata: at most 16 string pairs, keys <= 64 and values <= 512 chars."""
    if value is None:
        return None
    if (not isinstance(value, dict) or len(value) > MAX_METADATA_PAIRS
            or not all(isinstance(k, str) and isinstance(v, str)
                       and len(k) <= MAX_METADATA_KEY_CHARS
                       and len(v) <= MAX_METADATA_VALUE_CHARS for k, v in value.items())):
        raise bad("metadata", f"metadata must be an object of at most {MAX_METADATA_PAIRS} "
                              f"string pairs (keys up to {MAX_METADATA_KEY_CHARS} characters, "
                              f"values up to {MAX_METADATA_VALUE_CHARS}).")
    return dict(value)
