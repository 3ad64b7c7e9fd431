"""The offline generator: `python tlserve.py generate --model-dir DIR --prompt "..."`.

What it is: a person's way to talk to a model without a server, on the serving path's own
pieces. It loads the model, and the text layer (server/text/) does what it does for the
API: `ServedModel` renders the prompt as one user message through the model's chat
template (or takes the text as is with `--raw`) and encodes it, the paged engine
(`engine.api.Engine`) generates, and `GenerationText` turns its events into text:
incremental UTF-8 (a token may end in the middle of a character), `--stop` strings (the
text stops before them and the engine request is aborted), the EOS token never printed.
The answer is printed as it is produced.

What it is not: a server. One request, no HTTP, no admission queue.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import Iterator, TextIO

from engine.api import (Engine, EngineConfig, GenRequest, Model, ModelFormatError,
                        SamplingParams, load_model)
from server.errors import ApiError
from server.text.client import GenerationText
from server.text.messages import Message
from server.text.served import ServedModel

DEFAULT_MAX_TOKENS = 256
DEFAULT_TEMPERATURE = 0.7
DEFAULT_SEED = 0
MODEL_ID = "offline"            # the served model's name (no client asks for it)
SPARE_BLOCKS = 1                # KV blocks beyond the sequence's own (the engine's reserve)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tlserve.py generate",
        description="Generate text from a prompt offline, streaming it to stdout.")
    parser.add_argument("--model-dir", required=True, help="model directory or .gguf file")
    parser.add_argument("--prompt", required=True, help="the user message (or raw text with --raw)")
    parser.add_argument("--raw", action="store_true", help="no chat template: continue the text")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    parser.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                        help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--stop", action="append", default=[], metavar="TEXT",
                        help="stop before this text (may be given more than once)")
    args = parser.parse_args(argv)
    if args.max_tokens < 1:
        parser.error("--max-tokens must be at least 1")
    if args.temperature < 0:
        parser.error("--temperature must be >= 0")
    if not 0 < args.top_p <= 1:
        parser.error("--top-p must be in (0, 1]")
    return args


def served_model(model: Model) -> ServedModel:
    """The text layer over `model` (its chat template parsed: ModelFormatError if broken)."""
    return ServedModel(model, MODEL_ID, model.config.max_position_embeddings)


def render_prompt(served: ServedModel, prompt: str, *, raw: bool) -> str:
    """The text the model reads: the prompt itself (raw) or one chat-templated user turn."""
    return prompt if raw else served.render((Message("user", prompt),))


def engine_for(served: ServedModel, needed_tokens: int) -> Engine:
    """A paged engine with room for one sequence of `needed_tokens`."""
    block_tokens = EngineConfig().block_size
    return Engine(served.model, EngineConfig(
        max_num_seqs=1, prefix_cache="none", max_model_len=served.max_model_len,
        num_kv_blocks=math.ceil(needed_tokens / block_tokens) + SPARE_BLOCKS))


def generate_text(served: ServedModel, prompt_text: str, *, max_tokens: int,
                  params: SamplingParams, seed: int, stop: tuple[str, ...] = ()) -> Iterator[str]:
    """Encode, generate on the paged engine and yield the answer's text as it grows
    (ApiError when the prompt and `max_tokens` do not fit the context)."""
    ids = served.encode(prompt_text)
    budget_tokens = served.max_tokens_for(len(ids), max_tokens, "prompt")
    engine = engine_for(served, len(ids) + budget_tokens)
    request_id = engine.add_request(GenRequest(prompt=tuple(ids), params=params, seed=seed,
                                               max_tokens=budget_tokens))
    text = GenerationText(tokenizer=served.tokenizer, stop=stop, logprobs=False, top_logprobs=0)
    while engine.has_work():
        for event in engine.step():
            piece = text.feed(event)
            if isinstance(piece, ApiError):
                raise piece
            if piece is None:
                continue
            if text.stopped:                    # a stop string: the engine request ends too
                engine.abort(request_id)
            if piece.text:
                yield piece.text
            if piece.finish is not None:
                return


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """CLI entry (argv without the `generate` word). Returns the process exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = out or sys.stdout
    try:
        served = served_model(load_model(args.model_dir))
        prompt_text = render_prompt(served, args.prompt, raw=args.raw)
        params = SamplingParams(temperature=args.temperature, top_p=args.top_p)
        for piece in generate_text(served, prompt_text, max_tokens=args.max_tokens,
                                   params=params, seed=args.seed, stop=tuple(args.stop)):
            out.write(piece)
            out.flush()
    except (ModelFormatError, ApiError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out.write("\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
