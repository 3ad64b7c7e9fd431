"""The offline generator: `python tlserve.py generate --model-dir DIR --prompt "..."`.

What it is: a person's way to talk to a model without a server. It loads the model,
renders the prompt as one user message through the model's chat template (or uses the
text as is with `--raw`), runs the dense reference model (`engine/model/llama.py`) with its
contiguous K/V cache and the request sampler (`engine/core/sampler.py`), and prints the answer
as it is produced.

What it is not: the serving path. No batching, no paged cache, no HTTP.

Text streams at token granularity, but a token may end in the middle of a UTF-8
character (an emoji is often three tokens), so bytes go through the server's
`sse.TextStream` (no stop strings), which holds an incomplete tail back until the next
token completes it; invalid bytes become U+FFFD.
"""
from __future__ import annotations

import argparse
import sys
from typing import Iterable, Iterator, TextIO

from engine.api import (ModelFormatError, SamplingParams, generate_dense, load_model,
                        sample)
from sse import TextStream
from template import ChatFormat, TemplateSyntaxError

DEFAULT_MAX_TOKENS = 256
DEFAULT_TEMPERATURE = 0.7
DEFAULT_SEED = 0


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
    args = parser.parse_args(argv)
    if args.max_tokens < 1:
        parser.error("--max-tokens must be at least 1")
    if args.temperature < 0:
        parser.error("--temperature must be >= 0")
    if not 0 < args.top_p <= 1:
        parser.error("--top-p must be in (0, 1]")
    return args


def render_prompt(loaded, prompt: str, *, raw: bool) -> str:
    """The text the model reads: the prompt itself (raw) or one chat-templated user turn.

    The model's template is parsed here (TemplateSyntaxError for a broken one)."""
    if raw:
        return prompt
    tok = loaded.tokenizer
    chat = ChatFormat.from_source(loaded.chat_template, bos_token=tok.bos_token,
                                  eos_token=tok.eos_token)
    return chat.render([{"role": "user", "content": prompt}], add_generation_prompt=True)


def make_sample_fn(params: SamplingParams, *, seed: int, prompt_ids: Iterable[int]):
    """A stateful `sample_fn(logits_row) -> id` for `engine.api.generate_dense`.

    It numbers its draws (sample_index 0, 1, ...) and counts the tokens it returned, so
    penalties and the seeded stream behave as in the server.
    """
    counts: dict[int, int] = {}
    prompt_set = frozenset(int(t) for t in prompt_ids)
    index = [0]

    def sample_fn(logits_row) -> int:
        result = sample(logits_row, params, seed=seed, sample_index=index[0],
                                output_counts=counts, prompt_tokens=prompt_set)
        index[0] += 1
        counts[result.token] = counts.get(result.token, 0) + 1
        return result.token

    return sample_fn


def stream_text(pieces: Iterable[bytes]) -> Iterator[str]:
    """Token bytes in -> text pieces out, holding back incomplete UTF-8 sequences."""
    stream = TextStream()
    for chunk in pieces:
        text = stream.push(chunk)
        if text:
            yield text
    tail = stream.finish()
    if tail:
        yield tail


def generate_text(loaded, prompt_text: str, *, max_tokens: int, params: SamplingParams,
                  seed: int) -> Iterator[str]:
    """Encode, generate with the dense model and yield the answer's text as it grows.

    End-of-sequence tokens (the config's, which the loader merged with the tokenizer's)
    stop the generation and are not printed.
    """
    tok = loaded.tokenizer
    ids = tok.encode(prompt_text)
    stops = frozenset(loaded.config.eos_token_ids)
    sample_fn = make_sample_fn(params, seed=seed, prompt_ids=ids)
    tokens = generate_dense(loaded.config, loaded.weights, ids, max_new_tokens=max_tokens,
                            stop_ids=stops, sample_fn=sample_fn)
    yield from stream_text(tok.token_bytes(t) for t in tokens if t not in stops)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """CLI entry (argv without the `generate` word). Returns the process exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = out or sys.stdout
    try:
        loaded = load_model(args.model_dir)
        prompt_text = render_prompt(loaded, args.prompt, raw=args.raw)
    except (ModelFormatError, TemplateSyntaxError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p)
    for piece in generate_text(loaded, prompt_text, max_tokens=args.max_tokens,
                               params=params, seed=args.seed):
        out.write(piece)
        out.flush()
    out.write("\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
