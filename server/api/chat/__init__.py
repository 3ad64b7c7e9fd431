"""Chat completions, `POST /v1/chat/completions`: parse.py reads the request (typed messages,
tools), render.py writes the answer (whole or streamed, plain or with tool calls); `chat`
below is the handler: served model -> tools -> chat template -> tokens -> the launch
(server/api/launch.py).
"""
from __future__ import annotations

from server.api.chat.parse import parse_chat
from server.api.chat.render import renderer
from server.api.launch import (ApiContext, Endpoint, Launch, chat_prompt,
                               launch_generation, with_tools)
from server.door.routes import Params
from server.replies import Headers
from server.http.protocol import Request

CHAT = Endpoint(route="chat", id_prefix="chatcmpl", prompt_param="messages")


def chat(api: ApiContext, request: Request, params: Params, extra: Headers) -> Launch:
    spec = parse_chat(request.body, api.defaults_for(request.body), api.max_stop_strings)
    with api.serving(spec.model) as ctx:
        spec, offered = with_tools(ctx, spec)
        spec, prompt = chat_prompt(ctx, spec, offered)
        return launch_generation(ctx, request, spec, [prompt], CHAT, extra,
                                 lambda header: renderer(spec, header))
