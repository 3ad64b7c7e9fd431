"""Completions, `POST /v1/completions`: the request (prompts as text or token ids, `echo`,
`logprobs` as a count), its two answer shapes (`text_completion` whole or as SSE chunks) and
the handler: prompts -> token ids -> one engine request per prompt and choice.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.api import MAX_TOP_LOGPROBS
from server.api import documents as docs
from server.api.defaults import SamplingDefaults
from server.api.fields import bad, boolean, integer, is_int, load_json_object, token_ids, unsupported
from server.api.generation import DEFAULT_MAX_STOP_STRINGS, GenSpec, common_fields
from server.api.prediction import parse_prediction
from server.api.launch import ApiContext, Endpoint, launch_generation
from server.door.routes import Params
from server.errors import ApiError
from server.replies import Headers, json_bytes
from server.api.streams import Collected, GenerationStream, Renderer, WholeRenderer
from server.http.protocol import Request
from server.text.client import Echo, Piece, TokenLogprob
from sse import DONE, event

MAX_COMPLETION_LOGPROBS = MAX_TOP_LOGPROBS   # `logprobs`: 0..20 (vLLM's bound)
MAX_COMPLETION_PROMPTS = 64     # prompts in one call (one choice each)
DEFAULT_COMPLETION_MAX_TOKENS = 16   # OpenAI's default
CHAT_ONLY = ("tools", "tool_choice")             # /v1/completions has no tools: 422
COMPLETIONS = Endpoint(route="completions", id_prefix="cmpl", prompt_param="prompt")
_MISSING = object()


# ---- the request ------------------------------------------------------------------------------

def _one_prompt(v: Any) -> str | tuple[int, ...] | None:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and v and all(is_int(t) for t in v):
        return token_ids(v, "prompt")
    return None


def _prompts(doc: dict) -> tuple[str | tuple[int, ...], ...]:
    """A string, token ids, or a list of either: one choice per prompt, in order."""
    v = doc.get("prompt", _MISSING)
    one = _one_prompt(v)
    if one is not None:
        return (one,)
    many = tuple(_one_prompt(x) for x in v) if isinstance(v, list) and v else (None,)
    if any(x is None for x in many):
        raise bad("prompt", "'prompt' must be a string, a list of token ids, or a non-empty "
                            "list of strings or of token-id lists.")
    if len(many) > MAX_COMPLETION_PROMPTS:
        raise bad("prompt", f"'prompt' allows at most {MAX_COMPLETION_PROMPTS} prompts.")
    return many


def parse_completion(body: bytes, defaults: SamplingDefaults = SamplingDefaults(),
                     max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS) -> GenSpec:
    doc = load_json_object(body)
    if integer(doc, "best_of", 1, 1) > 1:
        raise unsupported("best_of", "Only best_of = 1 is supported.")
    for name in CHAT_ONLY:
        if doc.get(name) is not None:
            raise unsupported(name, f"'{name}' is served on /v1/chat/completions only.")
    prompts = _prompts(doc)
    echo = boolean(doc, "echo")
    n_logprobs = integer(doc, "logprobs", None, 0, MAX_COMPLETION_LOGPROBS)
    common = common_fields(doc, "completion",
                           default_max=defaults.max_tokens or DEFAULT_COMPLETION_MAX_TOKENS,
                           logprobs=n_logprobs is not None, top_logprobs=n_logprobs or 0,
                           defaults=defaults, least_max=0, max_stop_strings=max_stop_strings)
    if common.max_tokens == 0 and not echo:
        raise bad("max_tokens", "'max_tokens' 0 is only allowed with 'echo': true (score the "
                                "prompt without sampling).")
    return replace(common, prompts=prompts, echo=echo, prediction=parse_prediction(doc))


# ---- the answer -------------------------------------------------------------------------------

def _completion_entry(lp: TokenLogprob) -> tuple:
    return (lp.text, lp.logprob, None if lp.top is None else list(lp.top))


class CompletionChunks:
    """text_completion events, each naming its choice's `index`; logprobs' text_offset runs
    on across a choice's chunks (an echoed prompt's tokens first), as in one answer; the
    usage chunk when asked; `[DONE]` at the end."""
    streamed = True

    def __init__(self, header: docs.Header, spec: GenSpec):
        self.header, self.include_usage = header, spec.include_usage
        self._text_offset_chars: dict[int, int] = {}

    def piece(self, piece: Piece) -> bytes:
        entries = list(piece.prompt) + ([] if piece.logprob is None else [piece.logprob])
        logprobs = None
        if entries:
            start = self._text_offset_chars.get(piece.index, 0)
            logprobs = docs.completion_logprobs([_completion_entry(e) for e in entries],
                                                start_offset=start)
            self._text_offset_chars[piece.index] = start + sum(len(e.text) for e in entries)
        return event(json_bytes(docs.completion(self.header, piece.text, piece.finish, None,
                                                logprobs, index=piece.index)))

    def finish(self, usage: dict) -> bytes:
        tail = (event(json_bytes(docs.completion_usage_chunk(self.header, usage)))
                if self.include_usage else b"")
        return tail + DONE

    def error(self, err: ApiError) -> bytes:
        return event(json_bytes(err.document())) + DONE


class CompletionDocument(WholeRenderer):
    def _document(self, index: int, text: str, choice: Collected, usage: dict) -> dict:
        logprobs = None
        if self.logprobs:
            logprobs = docs.completion_logprobs([_completion_entry(e) for e in choice.entries])
        return docs.completion(self.header, text, choice.finish, usage, logprobs, index=index)


def renderer(spec: GenSpec, header: docs.Header) -> Renderer:
    return (CompletionChunks if spec.stream else CompletionDocument)(header, spec)


# ---- the handler ------------------------------------------------------------------------------

def completions(api: ApiContext, request: Request, params: Params, extra: Headers) -> GenerationStream:
    spec = parse_completion(request.body, api.defaults_for(request.body), api.max_stop_strings)
    with api.serving(spec.model) as ctx:
        served = ctx.served
        prompts = []
        for prompt in spec.prompts:
            if isinstance(prompt, tuple):
                served.check_token_ids(prompt, "prompt")
            ids = (list(prompt) if isinstance(prompt, tuple)
                   else served.encode(prompt, add_special_tokens=True))
            if not ids:
                raise bad("prompt", "The prompt must contain at least one token.")
            prompts.append(ids)
        echoes = None
        if spec.echo:                           # one per choice: prompt i's n choices
            echoes = [Echo(p if isinstance(p, str) else served.tokenizer.decode(list(p)),
                           ids[0], spec.logprobs) for p, ids in zip(spec.prompts, prompts)
                      for _ in range(spec.n)]
        return launch_generation(ctx, request, spec, prompts, COMPLETIONS, extra,
                                 lambda header: renderer(spec, header), echoes)
