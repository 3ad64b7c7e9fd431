"""The model list, `GET /v1/models` and `GET /v1/models/{model}`: a card per served model
(the chat models first, then the sentence-embedding models, each in configuration order),
each saying its kind and the routes it serves; then the LoRA adapters, each with `parent` =
its base's id and `root` = its folder, as vLLM lists them."""
from __future__ import annotations

from server.api import documents as docs
from server import replies
from server.api.launch import ADAPTER_TASKS, CHAT_TASKS, ENCODER_TASKS, ApiContext
from server.door.routes import Params
from server.replies import Headers
from server.http.protocol import Request, Response
from engine.api import KIND_CHAT, KIND_EMBEDDING
from server.api.adapters import KIND_LORA


def _cards(ctx: ApiContext) -> dict[str, dict]:
    cards = {}
    for model_id, chat in ctx.chats.items():
        served = chat.served
        cards[model_id] = docs.model_card(model_id, served.created, served.max_model_len,
                                          KIND_CHAT, CHAT_TASKS)
    for model_id, enc_thread in ctx.encoders.items():
        cards[model_id] = docs.model_card(model_id, enc_thread.created,
                                          enc_thread.encoder.max_seq_length,
                                          KIND_EMBEDDING, ENCODER_TASKS)
    for served in ctx.adapters.all():                 # vLLM's card: parent = the base's id
        base = ctx.chats[served.base].served
        cards[served.name] = docs.model_card(served.name, served.created, base.max_model_len,
                                             KIND_LORA, ADAPTER_TASKS, parent=served.base,
                                             root=served.adapter.path)
    return cards


def models(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    return replies.json_response(200, docs.model_list(list(_cards(ctx).values())))


def model(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    ctx.check_model(params["model"])
    return replies.json_response(200, _cards(ctx)[params["model"]])
