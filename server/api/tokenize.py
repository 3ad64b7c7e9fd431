"""Tokenize and detokenize, `POST /tokenize` and `POST /detokenize` (vLLM's extras): a prompt
or a chat (rendered by the served template, with chat's `chat_template_kwargs` and
`reasoning_effort`) -> token ids, and token ids -> text, with the named model's own
tokenizer. A sentence-embedding model tokenizes a prompt with its WordPiece vocabulary
([CLS] ... [SEP] unless add_special_tokens is false: the ids it embeds) and detokenizes as
BertTokenizer decodes ("##" pieces joined); it has no chat template, so `messages` is a 400.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from server.api import documents as docs
from server import replies
from server.api.chat.request import parse_messages
from server.replies import JSON_CONTENT_TYPE, json_bytes_piecewise
from server.api.fields import bad, boolean, load_json_object, model_name, token_ids
from server.api.launch import TASK_TOKENIZE, ApiContext
from server.api.thinking import template_variables
from server.door.routes import Params
from server.replies import Headers
from server.http.protocol import Request, Response
from server.text.messages import Message
from server.text.served import check_token_ids


@dataclass(frozen=True, kw_only=True)
class TokenizeSpec:
    model: str
    prompt: str = ""
    messages: tuple[Message, ...] = ()          # when given, the chat template renders them
    # Accepted (validated as a boolean) and ignored: the prompt is always tokenized without
    # added special tokens (no BOS/EOS), which is what generation sees too.
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    template_vars: tuple[tuple[str, object], ...] = ()   # chat_template_kwargs, as in chat


@dataclass(frozen=True, kw_only=True)
class DetokenizeSpec:
    model: str
    tokens: tuple[int, ...]


def parse_tokenize(body: bytes) -> TokenizeSpec:
    doc = load_json_object(body)
    model = model_name(doc)
    # vLLM's defaults: a raw prompt gets the model's special tokens (BOS), a rendered chat
    # does not (its template wrote them).
    add_special = boolean(doc, "add_special_tokens", doc.get("messages") is None)
    if doc.get("messages") is not None:
        return TokenizeSpec(model=model, messages=parse_messages(doc),
                            add_special_tokens=add_special,
                            add_generation_prompt=boolean(doc, "add_generation_prompt", True),
                            template_vars=template_variables(doc))
    prompt = doc.get("prompt")
    if not isinstance(prompt, str):
        raise bad("prompt", "'prompt' must be a string (or send 'messages').")
    return TokenizeSpec(model=model, prompt=prompt, add_special_tokens=add_special)


def parse_detokenize(body: bytes) -> DetokenizeSpec:
    doc = load_json_object(body)
    return DetokenizeSpec(model=model_name(doc), tokens=token_ids(doc.get("tokens"), "tokens"))


def tokenize(api: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    spec = parse_tokenize(request.body)
    with api.serving(spec.model, TASK_TOKENIZE) as ctx:
        enc_thread = ctx.encoder
        if enc_thread is not None:          # WordPiece ids, [CLS] ... [SEP] as it embeds them
            if spec.messages:
                raise bad("messages", f"The model '{spec.model}' is an embedding model: it "
                                      "has no chat template to render 'messages'; send "
                                      "'prompt'.")
            tokens = enc_thread.encoder.tokenizer.encode(
                spec.prompt, add_special_tokens=spec.add_special_tokens)
            limit = enc_thread.encoder.max_seq_length
        else:
            text = (ctx.served.render(spec.messages,
                                      add_generation_prompt=spec.add_generation_prompt,
                                      variables=dict(spec.template_vars))
                    if spec.messages else spec.prompt)
            tokens = ctx.served.encode(text, add_special_tokens=spec.add_special_tokens)
            limit = ctx.served.max_model_len
        return Response(status=200, headers=(JSON_CONTENT_TYPE,), body=json_bytes_piecewise(
            docs.tokenized(tokens, limit)), notes=(("model", spec.model),))


def detokenize(api: ApiContext, request: Request, params: Params, extra: Headers) -> Response:
    spec = parse_detokenize(request.body)
    with api.serving(spec.model, TASK_TOKENIZE) as ctx:
        enc_thread = ctx.encoder
        tokenizer = enc_thread.encoder.tokenizer if enc_thread is not None else ctx.served.tokenizer
        check_token_ids(spec.tokens, tokenizer.vocab_size, "tokens")
        answer = replies.json_response(200, docs.detokenized(tokenizer.decode(
            list(spec.tokens))))
        return replace(answer, notes=(("model", spec.model),))
