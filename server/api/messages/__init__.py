"""The Anthropic Messages API, `POST /v1/messages` and `POST /v1/messages/count_tokens`, for the
Anthropic SDKs and the tools and frameworks built on them (`ANTHROPIC_BASE_URL`).

A Messages request is a chat in other clothes, so it runs on the chat path unchanged:

    the body -> `parse_messages_request` (parse.py) -> a chat `GenSpec` with typed
    `Message`s -> `with_tools` (grammar-constrained calls) -> `chat_prompt` (the template,
    the thinking split) -> `launch_generation` -> `GenerationStream` with the Anthropic
    renderer (render.py: the whole `message`, or its SSE events)

count_tokens renders the same prompt and answers its length, `{"input_tokens": N}`, which
is what `usage.input_tokens` of the same request counts. Errors on these paths come in
Anthropic's document and statuses (server/errors.py `ErrorShape`), the transport's too.
"""
from __future__ import annotations

from dataclasses import replace

from server.api.generation import GenSpec
from server.api.launch import (ApiContext, Endpoint, ModelContext, chat_prompt,
                               launch_generation, with_tools)
from server.api.messages.parse import parse_messages_request
from server.api.messages.render import ID_PREFIX, renderer
from server.api.streams import GenerationStream
from server.door.routes import Params
from server.errors import ErrorShape
from server.http.protocol import Request, Response
from server.replies import Headers, json_response

__all__ = ["MESSAGES", "count_tokens", "messages"]
MESSAGES = Endpoint(route="messages", id_prefix=ID_PREFIX, prompt_param="messages",
                    errors=ErrorShape.ANTHROPIC)


def _prompt(ctx: ModelContext, spec: GenSpec) -> tuple[GenSpec, list[int]]:
    """Chat's tools and template: the spec with its tools and thinking, the prompt's ids."""
    spec, offered = with_tools(ctx, spec)
    return chat_prompt(ctx, spec, offered)


def messages(api: ApiContext, request: Request, params: Params,
             extra: Headers) -> GenerationStream:
    spec = parse_messages_request(request.body, api.defaults_for(request.body),
                                  api.max_stop_strings)
    with api.serving(spec.model) as ctx:
        spec, prompt = _prompt(ctx, spec)
        return launch_generation(ctx, request, spec, [prompt], MESSAGES, extra,
                                 lambda header: renderer(spec, header, len(prompt)))


def count_tokens(api: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    spec = parse_messages_request(request.body, api.defaults_for(request.body),
                                  api.max_stop_strings, counting=True)
    with api.serving(spec.model) as ctx:
        _, prompt = _prompt(ctx, spec)
        answer = json_response(200, {"input_tokens": len(prompt)})
        return replace(answer, notes=(("model", spec.model),))
