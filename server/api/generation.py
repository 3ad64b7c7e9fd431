"""What every generation request shares (chat, completions, and the Responses API on the chat
path): the validated `GenSpec` and the fields that fill it, refused as follows.

* a value out of range or of the wrong type      -> 400 `invalid_request_error`, `param` = field
* a real OpenAI field this engine does not serve -> 422 `unsupported_parameter`
  (`suffix`, the legacy `functions`)
* `response_format`, `guided_*`, `structured_outputs`: server/api/structured.py
* unknown fields                                 -> ignored (clients send many;
  `prompt_cache_key` among them: a routing hint for the load balancer, it scopes nothing)

Each endpoint parses its own fields (server/api/chat/request.py, server/api/completions.py,
server/api/responses/parse.py) over `common_fields`; the served-model and context checks
need the model, so they run after parsing (server/api/launch.py, server/text/served.py).
`parse_priority` reads the `X-TL-Priority` header.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.api import SamplingParams
from server.api.defaults import SamplingDefaults
from server.api.fields import (bad, boolean, integer, is_int, is_number, model_name, number,
                               token_ids, unsupported)
from server.api.structured import Structured, parse_structured
from server.api.tools import ToolsSpec
from server.text.messages import Message
from server.text.reasoning import Thinking

# `stop` sequences a request may give: OpenAI's 4 by default; `[engine].max_stop_strings`
# raises it for evaluation harnesses that send more.
DEFAULT_MAX_STOP_STRINGS = 4
MAX_STOP_TOKEN_IDS = 64
MAX_LOGIT_BIAS_ENTRIES = 300    # OpenAI's own bound
MAX_CHOICES = 8                 # `n`: choices per prompt (each one engine sequence)
MAX_PRIORITY = 100              # X-TL-Priority: -100..100, higher runs first
MAX_TEMPERATURE = 2.0           # OpenAI's range (Anthropic's is 0..1)
MAX_CACHE_SALT_CHARS = 1024
UNSUPPORTED_IF_PRESENT = ("functions", "function_call", "suffix")


@dataclass(frozen=True, kw_only=True)
class GenSpec:
    """A validated generation request (chat or completion), before templating."""
    kind: str                                   # "chat" | "completion" | "responses"
    model: str
    messages: tuple[Message, ...] = ()          # chat: the conversation, typed once
    prompts: tuple[str | tuple[int, ...], ...] = ()   # completion: texts or token ids
    echo: bool = False                          # completion: the prompt text (and scores) first
    n: int = 1                                  # choices per prompt
    max_tokens: int | None = None               # None: up to the context limit
    params: SamplingParams = SamplingParams()
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_ids: tuple[int, ...] = ()
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    structured: Structured | None = None        # a grammar the output must follow
    tools: ToolsSpec | None = None              # chat: functions the model may call
    template_vars: tuple[tuple[str, Any], ...] = ()   # chat: the template's further names
    thinking: Thinking | None = None            # chat: the answer's reasoning split off (set
                                                # once the prompt is rendered: launch.py)
    prediction: str | None = None               # chat, completion: the predicted answer text
                                                # (server/api/prediction.py), drafts only
    cache_salt: str | None = None               # the tenant's: scopes the prefix cache and drafts


def cache_salt(doc: dict) -> str | None:
    """`cache_salt` (vLLM's and SGLang's field): requests share cached prefixes and drafted
    continuations only with requests of the same salt. A non-empty string, or absent."""
    v = doc.get("cache_salt")
    if v is None:
        return None
    if not isinstance(v, str) or not v or len(v) > MAX_CACHE_SALT_CHARS:
        raise bad("cache_salt", f"'cache_salt' must be a non-empty string of at most "
                                f"{MAX_CACHE_SALT_CHARS} characters.")
    return v


def _stop(doc: dict, limit: int, name: str = "stop") -> tuple[str, ...]:
    v = doc.get(name)
    if v is None:
        return ()
    stops = [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad(name, f"'{name}' must be a string or a list of strings.")
    if len(stops) > limit:
        raise bad(name, f"'{name}' allows at most {limit} sequences, got {len(stops)}.")
    return tuple(stops)


def _logit_bias(doc: dict) -> tuple[tuple[int, float], ...]:
    v = doc.get("logit_bias")
    if v is None:
        return ()
    if not isinstance(v, dict) or len(v) > MAX_LOGIT_BIAS_ENTRIES:
        raise bad("logit_bias", "'logit_bias' must map token ids to numbers in [-100, 100].")
    out = []
    for key, bias in v.items():
        if not (isinstance(key, str) and key.isdigit()) or not is_number(bias) or abs(bias) > 100:
            raise bad("logit_bias", f"Invalid logit_bias entry {key!r}: {bias!r}; "
                                    "expected a token id and a number in [-100, 100].")
        out.append((int(key), float(bias)))
    return tuple(sorted(out))


def _refuse_unsupported(doc: dict) -> None:
    for name in UNSUPPORTED_IF_PRESENT:
        if doc.get(name) is not None:
            raise unsupported(name, f"'{name}' is not supported by this server.")


def _stream_flags(doc: dict) -> tuple[bool, bool]:
    stream = boolean(doc, "stream")
    options = doc.get("stream_options")
    if options is None:
        return stream, False
    if not isinstance(options, dict):
        raise bad("stream_options", "'stream_options' must be an object.")
    if not stream:
        raise bad("stream_options", "'stream_options' is only allowed when 'stream' is true.")
    return stream, boolean(options, "include_usage")


def _sampling(doc: dict, *, logprobs: bool, top_logprobs: int,
              defaults: SamplingDefaults, max_temperature: float) -> SamplingParams:
    top_k = integer(doc, "top_k", defaults.top_k, -1)
    return SamplingParams(
        temperature=number(doc, "temperature", defaults.temperature, 0.0, max_temperature),
        top_p=number(doc, "top_p", defaults.top_p, 0.0, 1.0, lo_open=True),
        top_k=max(top_k, 0),                                  # vLLM's -1 means off too
        min_p=number(doc, "min_p", defaults.min_p, 0.0, 1.0),
        presence_penalty=number(doc, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=number(doc, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=number(doc, "repetition_penalty", defaults.repetition_penalty,
                                  0.0, 10.0, lo_open=True),
        logit_bias=_logit_bias(doc),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        ignore_eos=boolean(doc, "ignore_eos"),
        min_tokens=integer(doc, "min_tokens", 0, 0),
    )


def _max_tokens(doc: dict, default: int | None, least: int = 1) -> int | None:
    value = integer(doc, "max_completion_tokens", None, 1)
    return integer(doc, "max_tokens", default, least) if value is None else value


def common_fields(doc: dict, kind: str, *, default_max: int | None, logprobs: bool,
                  top_logprobs: int, defaults: SamplingDefaults, least_max: int = 1,
                  max_stop_strings: int = DEFAULT_MAX_STOP_STRINGS,
                  max_temperature: float = MAX_TEMPERATURE, stop_param: str = "stop") -> GenSpec:
    """The fields chat and completions share, as a `GenSpec` each adds its own to; the
    Anthropic Messages route reads its stops from `stop_param` and its own temperature
    range."""
    _refuse_unsupported(doc)
    stream, include_usage = _stream_flags(doc)
    seed = doc.get("seed")
    if seed is not None and not is_int(seed):
        raise bad("seed", f"{seed!r} is not valid for 'seed': expected an integer.")
    stop_ids = doc.get("stop_token_ids")
    return GenSpec(kind=kind, model=model_name(doc), n=integer(doc, "n", 1, 1, MAX_CHOICES),
                   max_tokens=_max_tokens(doc, default_max, least_max),
                   params=_sampling(doc, logprobs=logprobs, top_logprobs=top_logprobs,
                                    defaults=defaults, max_temperature=max_temperature),
                   seed=seed, stop=_stop(doc, max_stop_strings, stop_param), stream=stream, include_usage=include_usage,
                   stop_ids=() if stop_ids is None else token_ids(stop_ids, "stop_token_ids",
                                                                  limit=MAX_STOP_TOKEN_IDS),
                   logprobs=logprobs, top_logprobs=top_logprobs,
                   structured=parse_structured(doc), cache_salt=cache_salt(doc))


def parse_priority(value: str | None) -> int:
    """`X-TL-Priority`: an integer in -100..100 (higher runs first); absent = 0."""
    if value is None:
        return 0
    try:
        priority = int(value.strip())
    except ValueError:
        priority = None
    if priority is None or not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise bad("X-TL-Priority", f"X-TL-Priority must be an integer in -100..100, got {value!r}.")
    return priority
