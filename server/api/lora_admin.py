"""`POST /v1/load_lora_adapter` and `POST /v1/unload_lora_adapter` (vLLM's routes and bodies):
the handlers over `ApiContext`; the checks, the path rule and the loading are
server/api/adapters.py's. Unloading tells the adapter's base engine, which frees what it keeps
for it (its merged weights, engine/model/lora_merge.py). A runtime adapter runs on the
first chat model (vLLM serves one base per server; with several chat models, name the base
in a `[[models]]` table instead).
"""
from __future__ import annotations

from server.api.adapters import done_response, load_request, unload_request
from server.api.launch import ApiContext
from server.door.routes import Params
from server.errors import ApiError
from server.http.protocol import Request, Response
from server.replies import Headers


def load_lora_adapter(ctx: ApiContext, request: Request, params: Params,
                      extra: Headers) -> Response:
    ctx.runtime_lora.check()
    base = next(iter(ctx.chats), None)
    if base is None:
        raise ApiError("runtime_lora_disabled", "This server serves no chat model to run an "
                                                "adapter on.")
    config = ctx.chats[base].served.model.config
    served = load_request(request.body, ctx.runtime_lora, ctx.adapters, ctx.model_ids(), base,
                          config)
    return done_response(f"Success: LoRA adapter '{served.name}' added successfully.", extra)


def unload_lora_adapter(ctx: ApiContext, request: Request, params: Params,
                        extra: Headers) -> Response:
    served = unload_request(request.body, ctx.runtime_lora, ctx.adapters)
    base = ctx.chats.get(served.base)
    if base is not None:                  # its engine frees the adapter's merged weights
        base.client.forget_adapter(served.adapter)
    return done_response(f"Success: LoRA adapter '{served.name}' removed successfully.", extra)
