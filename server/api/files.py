"""OpenAI's Files API for batch work: `POST /v1/files` (a multipart upload, purpose
"batch"), `GET /v1/files`, `GET /v1/files/{file_id}`, `GET /v1/files/{file_id}/content`,
`DELETE /v1/files/{file_id}`.

These handlers read the request and answer the documents; the store behind them is the
`BatchBackend` (server/api/batch_backend.py) serve.py hands in. The upload's body was
written to a spool file as it arrived (server/batch/spool.py, through the HTTP layer's
body sink), so it may pass the usual 8 MiB body limit up to `[batch] max_file_mib`; the
form is scanned there in pieces (multipart.py) and the file part copied into the store,
never held whole. Every client holding the server's API key sees every file: the server
has no notion of owners.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO
from urllib.parse import parse_qs

from server import replies
from server.api.batch_backend import BatchBackend
from server.api.launch import ApiContext
from server.api.multipart import read_form
from server.door.routes import Params
from server.errors import ApiError, bad
from server.http.protocol import Request, Response
from server.replies import Headers

JSONL_TYPE = (("Content-Type", "application/jsonl"),)
DEFAULT_FILENAME = "upload.jsonl"
FILES_DEFAULT_LIMIT, FILES_MAX_LIMIT = 10_000, 10_000    # OpenAI's bounds on a files page


def batch_api(ctx: ApiContext) -> BatchBackend:
    """The Batch API's backend, or the 404 of a server started without `[batch] dir`."""
    if ctx.batches is None:
        raise ApiError("batch_api_off", "The Batch API is off on this server: set "
                                        "[batch].dir to turn it on.")
    return ctx.batches


def upload(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    """The form read where the body is -- the spool file the HTTP layer wrote as it
    arrived, or memory for a body it did not spool -- and its file part copied into the
    store in pieces; the spool file is deleted whatever the answer. A spooled body is read
    once its writer says it has landed: a write that failed (the disk full) is a 507."""
    error = request.spooled.landing.wait() if request.spooled is not None else None
    try:
        if error is not None:
            raise ApiError("storage_full", f"The upload could not be written to disk "
                           f"({error.strerror or error}).") from None
        api = batch_api(ctx)
        with _body_source(request) as source:
            form = read_form(source, request.header("content-type") or "")
            part = form.files.get("file")
            if part is None:
                raise bad("file", "The form has no file field.")
            if part.length > api.max_file_bytes:
                raise ApiError("body_too_large", f"The file is over the "
                               f"{api.max_file_bytes // 2**20} MiB limit "
                               "([batch].max_file_mib).", param="file")
            if "purpose" not in form.fields:
                raise bad("purpose", "The form has no purpose field.")
            document = api.upload(part.filename or DEFAULT_FILENAME,
                                  form.fields["purpose"].strip(), part.reader(source),
                                  part.length)
    finally:
        if request.spooled is not None:
            Path(request.spooled.path).unlink(missing_ok=True)   # gone if a write failed
    return replies.json_response(200, document)


def _body_source(request: Request) -> BinaryIO:
    if request.spooled is not None:
        return open(request.spooled.path, "rb")
    return io.BytesIO(request.body)


def list_files(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    """The files, or those of one `purpose` ("batch": uploads, "batch_output": outputs),
    newest first (`order=asc`: oldest first), paged by `after` (a file id) and `limit`
    (1..10000, default 10000), as OpenAI's."""
    query = parse_qs(request.query)
    purpose = query.get("purpose", [None])[0]
    order = query.get("order", ["desc"])[0]
    if order not in ("asc", "desc"):
        raise bad("order", f'order must be "asc" or "desc", got {order!r}.')
    limit = page_limit(query, FILES_DEFAULT_LIMIT, FILES_MAX_LIMIT)
    documents = [d for d in batch_api(ctx).files() if purpose in (None, d["purpose"])]
    if order == "desc":
        documents.reverse()
    return replies.json_response(200, page(documents, query.get("after", [None])[0], limit))


def page_limit(query: dict[str, list[str]], default: int, most: int) -> int:
    """The `limit` query parameter, 1..`most`; a 400 naming it otherwise."""
    text = query.get("limit", [str(default)])[0]
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise bad("limit", f"limit must be an integer in 1..{most}, got {text!r}.")
    return limit


def page(documents: list[dict], after: str | None, limit: int) -> dict:
    """The list document of the `limit` objects after the one whose id is `after` (an id
    not in the list: an empty page)."""
    if after is not None:
        ids = [d["id"] for d in documents]
        documents = documents[ids.index(after) + 1:] if after in ids else []
    return list_document(documents[:limit], has_more=len(documents) > limit)


def retrieve_file(ctx: ApiContext, request: Request, params: Params,
                  extra: Headers) -> Response:
    return replies.json_response(200, batch_api(ctx).file(params["file_id"]))


def file_content(ctx: ApiContext, request: Request, params: Params,
                 extra: Headers) -> Response:
    return Response(status=200, headers=JSONL_TYPE,
                    body=batch_api(ctx).file_content(params["file_id"]))


def delete_file(ctx: ApiContext, request: Request, params: Params,
                extra: Headers) -> Response:
    return replies.json_response(200, batch_api(ctx).delete_file(params["file_id"]))


def list_document(data: list[dict], *, has_more: bool) -> dict:
    """OpenAI's list of objects, with the first and last ids for paging."""
    return {"object": "list", "data": data, "has_more": has_more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}
