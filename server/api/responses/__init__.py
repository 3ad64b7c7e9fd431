"""The Responses API, `POST /v1/responses`, stateless.

A Responses request is a chat in other clothes, so it runs on the chat path unchanged:

    input (a string, or message items with `input_text` parts) + instructions (the system
    message) -> `parse_responses` -> a `GenSpec` (kind "responses") + the settings the
    answer echoes -> the chat template -> one engine sequence -> `GenerationStream`

Only the output shape differs, so it is two renderers with the shell's interface
(server/api/streams.py), in render.py: `ResponseDocument` (one `response` object) and
`ResponseEvents` (the typed SSE events). The package:

    __init__.py the handler (`responses`)
    parse.py    the request -> `ResponsesSpec`
    tools.py    function tools, the history's call items, the answer's function_call items
    render.py   the response object and the event stream

With function `tools` (tools.py maps them, and the `function_call` /
`function_call_output` items of the history, onto chat's tool machinery), the answer's
calls become `function_call` output items after the message item (which is left out when
the answer is calls only); streamed, each call is output_item.added,
function_call_arguments.delta..., function_call_arguments.done, output_item.done.

Nothing is stored: `store: true`, `previous_response_id`, `conversation` and `background`
are 422 (there is no server-side state to keep or continue), as are built-in tools.
`text.format` json_schema / json_object go through the structured-outputs machinery
(server/api/structured.py's `Structured`, compiled per request).
"""
from __future__ import annotations

from dataclasses import replace

from server.api.launch import (ApiContext, Endpoint, chat_prompt,
                               launch_generation, with_tools)
from server.door.routes import Params
from server.replies import Headers
from server.api.responses.parse import ResponsesSpec, parse_responses
from server.api.responses.render import renderer
from server.api.streams import GenerationStream
from server.http.protocol import Request

__all__ = ["RESPONSES", "ResponsesSpec", "parse_responses", "renderer", "responses"]
RESPONSES = Endpoint(route="responses", id_prefix="resp", prompt_param="input")


def responses(api: ApiContext, request: Request, params: Params, extra: Headers) -> GenerationStream:
    """The handler: the chat path (tools, template, tokens), the Responses renderer."""
    spec = parse_responses(request.body, api.defaults_for(request.body))
    with api.serving(spec.gen.model) as ctx:
        gen, offered = with_tools(ctx, spec.gen)
        gen, prompt = chat_prompt(ctx, gen, offered)
        spec = replace(spec, gen=gen)
        return launch_generation(ctx, request, gen, [prompt], RESPONSES, extra,
                                 lambda header: renderer(spec, header))
