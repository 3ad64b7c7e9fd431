"""OpenAI's Files API for batch work: `POST /v1/files` (a multipart upload, purpose
"batch"), `GET /v1/files`, `GET /v1/files/{file_id}`, `GET /v1/files/{file_id}/content`,
`DELETE /v1/files/{file_id}`.

These handlers read the request and answer the documents; the store behind them is the
`BatchBackend` (server/api/batch_backend.py) serve.py hands in. The upload is the
request's body, read whole by the HTTP layer (so it is bounded by the body limit as well
as by `[batch] max_file_mib`), split by the standard library's MIME parser. Every client
holding the server's API key sees every file: the server has no notion of owners.
"""
from __future__ import annotations

from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from urllib.parse import parse_qs

from server import replies
from server.api.batch_backend import BatchBackend
from server.api.launch import ApiContext
from server.door.routes import Params
from server.errors import ApiError, bad
from server.http.protocol import Request, Response
from server.replies import Headers

JSONL_TYPE = (("Content-Type", "application/jsonl"),)
DEFAULT_FILENAME = "upload.jsonl"


def batch_api(ctx: ApiContext) -> BatchBackend:
    """The Batch API's backend, or the 404 of a server started without `[batch] dir`."""
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
    return replies.json_response(200, api.upload(filename, purpose, data))


def list_files(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    """Every file, or those of one `purpose` ("batch": uploads, "batch_output": outputs)."""
    purpose = parse_qs(request.query).get("purpose", [None])[0]
    documents = [d for d in batch_api(ctx).files() if purpose in (None, d["purpose"])]
    return replies.json_response(200, list_document(documents, has_more=False))


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
    return (purpose.strip(), part.get_filename() or DEFAULT_FILENAME,
            part.get_payload(decode=True) or b"")
