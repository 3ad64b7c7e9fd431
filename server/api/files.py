"""OpenAI's Files API for batch work: `POST /v1/files` (a multipart upload, purpose
"batch"), `GET /v1/files`, `GET /v1/files/{file_id}`, `GET /v1/files/{file_id}/content`,
`DELETE /v1/files/{file_id}`.

The store (server/batch/store.py) keeps the bytes and the file objects; these handlers
read the request, check it, and answer OpenAI's documents. The upload is the request's
body, read whole by the HTTP layer (so it is bounded by the body limit as well as by
`[batch] max_file_mib`), split by the standard library's MIME parser. Every client holding
the server's API key sees every file: the server has no notion of owners.
"""
from __future__ import annotations

from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP

from server import replies
from server.api.launch import ApiContext
from server.batch.store import PURPOSE_BATCH, FileRecord, StoreFull
from server.batch.worker import BatchApi
from server.door.routes import Params
from server.errors import ApiError, bad
from server.http.protocol import Request, Response
from server.replies import Headers

JSONL_TYPE = (("Content-Type", "application/jsonl"),)


def batch_api(ctx: ApiContext) -> BatchApi:
    """The Batch API's parts, or the 404 of a server started without `[batch] dir`."""
    if ctx.batches is None:
        raise ApiError("batch_api_off", "The Batch API is off on this server: set "
                                        "[batch].dir to turn it on.")
    return ctx.batches


def upload(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    api = batch_api(ctx)
    if len(request.body) > api.max_file_bytes:
        raise ApiError("body_too_large", f"The file is over the {api.max_file_bytes // 2**20} "
                                         "MiB limit ([batch].max_file_mib).", param="file")
    purpose, filename, data = _form(request)
    if purpose != PURPOSE_BATCH:
        raise bad("purpose", f'purpose must be "batch", got {purpose!r}.')
    try:
        record = api.store.add_file(filename, purpose, data)
    except StoreFull as exc:
        raise ApiError("storage_full", f"{exc}; delete files to make room.") from None
    return replies.json_response(200, record.document())


def list_files(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    records = batch_api(ctx).store.files()
    return replies.json_response(200, _file_list(records))


def retrieve_file(ctx: ApiContext, request: Request, params: Params,
                  extra: Headers) -> Response:
    return replies.json_response(200, _file(ctx, params["file_id"]).document())


def file_content(ctx: ApiContext, request: Request, params: Params,
                 extra: Headers) -> Response:
    record = _file(ctx, params["file_id"])
    try:
        data = batch_api(ctx).store.file_path(record.id).read_bytes()
    except FileNotFoundError:
        raise _missing(record.id) from None
    return Response(status=200, headers=JSONL_TYPE, body=data)


def delete_file(ctx: ApiContext, request: Request, params: Params,
                extra: Headers) -> Response:
    file_id = params["file_id"]
    if not batch_api(ctx).store.delete_file(file_id):
        raise _missing(file_id)
    return replies.json_response(200, {"id": file_id, "object": "file", "deleted": True})


def _file(ctx: ApiContext, file_id: str) -> FileRecord:
    record = batch_api(ctx).store.file(file_id)
    if record is None:
        raise _missing(file_id)
    return record


def _missing(file_id: str) -> ApiError:
    return ApiError("file_not_found", f"No such file: {file_id!r}.", param="file_id")


def _file_list(records: list[FileRecord]) -> dict:
    data = [r.document() for r in records]
    return {"object": "list", "data": data, "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


def _form(request: Request) -> tuple[str, str, bytes]:
    """(purpose, filename, file bytes) of a multipart/form-data body, or the 400 saying
    what is missing."""
    content_type = request.header("content-type") or ""
    if not content_type.lower().startswith("multipart/form-data"):
        raise bad("file", "Upload the file as multipart/form-data (fields purpose and file).")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = BytesParser(policy=HTTP).parsebytes(head + request.body)
    fields: dict[str, Message] = {}
    if message.is_multipart():
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if isinstance(name, str):
                fields.setdefault(name, part)
    if "file" not in fields:
        raise bad("file", "The form has no file field.")
    if "purpose" not in fields:
        raise bad("purpose", "The form has no purpose field.")
    purpose = (fields["purpose"].get_payload(decode=True) or b"").decode("utf-8", "replace")
    part = fields["file"]
    return purpose.strip(), part.get_filename() or "upload.jsonl", part.get_payload(decode=True) or b""
