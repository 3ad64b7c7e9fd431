"""Chat completions, `POST /v1/chat/completions`: parse.py reads the request (typed messages,
tools), render.py writes the answer (whole or streamed, plain or with tool calls); `chat`
below is the handler: served model -> tools -> chat template -> tokens -> the launch.
"""
from __future__ import annotations

from dataclasses import replace

from server.api.chat.parse import parse_chat
from server.api.chat.render import renderer
from server.api.generation import GenSpec
from server.api.launch import ApiContext, Endpoint, Headers, Launch, Params, launch_generation
from server.api.structured import Structured
from server.api import tools as tl
from server.http.protocol import Request

CHAT = Endpoint(route="chat", id_prefix="chatcmpl", prompt_param="messages")


def chat(ctx: ApiContext, request: Request, params: Params, extra: Headers) -> Launch:
    spec = parse_chat(request.body, ctx.defaults)
    ctx.check_model(spec.model)
    spec, offered = with_tools(ctx, spec)
    prompt = ctx.served.encode(ctx.served.render(spec.messages, tools=offered))
    return launch_generation(ctx, request, spec, [prompt], CHAT, extra,
                             lambda header: renderer(spec, header))


def with_tools(ctx: ApiContext, spec: GenSpec) -> tuple[GenSpec, tuple[dict, ...]]:
    """Tools validated, compiled, in the template's format, their grammar asked for; and
    the tools the template is offered (chat and Responses alike)."""
    if spec.tools is None:
        return spec, ()
    tl.check_tools_compile(ctx.served.grammars, spec.tools)
    spec = replace(spec, tools=tl.with_format(spec.tools, ctx.served.tool_format))
    grammar = tl.call_grammar_spec(spec.tools)
    if grammar is not None and spec.structured is None:   # auto + response_format: that one
        spec = replace(spec, structured=Structured("tool_choice", grammar))
    return spec, (spec.tools.tools if spec.tools.offered else ())
