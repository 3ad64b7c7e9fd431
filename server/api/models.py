"""The model list, `GET /v1/models` and `GET /v1/models/{model}`: the one served model's card."""
from __future__ import annotations

from server.api import documents as docs
from server import replies
from server.api.launch import ApiContext
from server.door.routes import Params
from server.replies import Headers
from server.http.protocol import Request, Response


def _card(ctx: ApiContext) -> dict:
    served = ctx.served
    return docs.model_card(served.id, served.created, served.max_model_len)


def models(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    return replies.json_response(200, docs.model_list([_card(ctx)]))


def model(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    ctx.check_model(params["model"])
    return replies.json_response(200, _card(ctx))
