"""`python tlserve.py run-batch -i IN.jsonl -o OUT.jsonl [--config runtime.toml]`.

The server's own objects built in this process, with no listener: the models and their
threads (server/loading.py), the off-loop pool and the `ApiApp` of the API listener, so each
input line is answered exactly as `POST` to its url would be. server/batch/ does the rest
(the lines, the runner, the output file, the progress). In order:

    read IN -> a duplicate custom_id? exit 2 naming the lines, before any model loads
    -> open OUT (resume: its complete lines' ids are skipped, a partial last line cut)
    -> nothing left? exit 0 -> load the models -> run -> exit 0 (every line answered)

SIGTERM or Ctrl-C stops the submitting and finishes the requests in flight (a second one
exits at once); a rerun with the same OUT picks up from there. Exit status: 0 when every
line has its output line (errors included), 1 when stopped early or the model failed to
load, 2 for a bad command line, config, input or output file.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from dataclasses import replace
from typing import Callable, TextIO

from engine.api import model_name, tune_malloc
from server.api.app import ApiApp
from server.batch.job import RunSummary, pending_lines, run_lines
from server.batch.lines import BatchLine, DuplicateIds, duplicate_ids, read_lines
from server.batch.output import OutputFile, OutputFileError
from server.batch.progress import Progress
from server.batch.runner import BatchRunner, Wake
from server.config import ConfigError, ServeConfig
from server.loading import EngineWrapper, StartupError, load_models
from server.offloop.pool import OffLoopPool
from server.state import ServerState

log = logging.getLogger("tlserve.batch")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tlserve.py run-batch",
        description="Answer a JSONL file of OpenAI batch requests in this process (no "
                    "server) and write OpenAI's output lines; rerun with the same output "
                    "file to resume.")
    p.add_argument("-i", "--input", required=True, metavar="IN.jsonl",
                   help='one request a line: {"custom_id", "method": "POST", "url", "body"}')
    p.add_argument("-o", "--output", required=True, metavar="OUT.jsonl",
                   help="the output lines are appended here; lines already there are skipped")
    p.add_argument("--config", metavar="PATH", help="runtime.toml, as for serving")
    p.add_argument("--model-dir", metavar="DIR", help="overrides [engine].model_dir")
    p.add_argument("--max-in-flight", type=int, metavar="N",
                   help="requests submitted at once (default: [engine].max_num_seqs)")
    p.add_argument("--log-level", default="WARNING",
                   choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    args = p.parse_args(argv)
    if args.max_in_flight is not None and args.max_in_flight < 1:
        p.error("--max-in-flight must be at least 1")
    return args


def config_of(args: argparse.Namespace, env=None) -> ServeConfig:
    env = os.environ if env is None else env
    cfg = ServeConfig.load(args.config, env) if args.config else ServeConfig.from_toml("", env)
    if args.model_dir:
        derived = cfg.model_id == model_name(cfg.model_dir)      # derived, not chosen
        cfg = replace(cfg, model_dir=args.model_dir,
                      model_id=model_name(args.model_dir) if derived else cfg.model_id)
    return cfg


def main(argv: list[str], wrap_engine: EngineWrapper | None = None,
         out: TextIO | None = None) -> int:
    """CLI entry (argv without the `run-batch` word); `out` gets the progress (stderr)."""
    args = parse_args(argv)
    out = out or sys.stderr
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config_of(args)
        with open(args.input, "rb") as handle:
            lines = read_lines(handle.read())
        duplicates = duplicate_ids(lines)
        if duplicates:
            raise DuplicateIds(duplicates)
        output = OutputFile.open(args.output)
    except ConfigError as exc:
        return _fail(f"config error: {exc}", 2)
    except OSError as exc:
        return _fail(f"cannot open {exc.filename}: {exc.strerror}", 2)
    except (DuplicateIds, OutputFileError) as exc:
        return _fail(f"{args.input}: {exc}; nothing was run" if isinstance(exc, DuplicateIds)
                     else str(exc), 2)
    try:
        if not pending_lines(lines, output.done_keys):
            print(f"run-batch: all {len(lines)} lines already answered in {args.output}",
                  file=out)
            return 0
        summary = _run(cfg, args, lines, output, wrap_engine, out)
    except StartupError as exc:
        return _fail(str(exc), 1)
    finally:
        output.close()
    print(f"run-batch: {summary.answered_lines} answered ({summary.failed_lines} with an "
          f"error), {summary.skipped_lines} already in {args.output}"
          + ("" if summary.complete else f", {summary.left_lines} left: run again to resume"),
          file=out)
    return 0 if summary.complete else 1


def _run(cfg: ServeConfig, args: argparse.Namespace, lines: list[BatchLine], output: OutputFile,
         wrap_engine: EngineWrapper | None, out: TextIO) -> RunSummary:
    tune_malloc()                        # process-wide, as the server's start-up does
    loaded = load_models(cfg, wrap_engine)
    wake = Wake()
    loaded.set_wake(wake)
    pool = OffLoopPool(wake=wake)
    app = ApiApp(chats=loaded.chats, state=ServerState(), ping_interval_s=cfg.ping_interval_s,
                 offloop=pool, encoders=loaded.encoders, max_stop_strings=cfg.max_stop_strings)
    runner = BatchRunner(app, wake, max_in_flight=args.max_in_flight or cfg.engine.max_num_seqs)
    progress = Progress(out, total=len(lines), already_done=len(lines) - len(
        pending_lines(lines, output.done_keys)), tty=out.isatty())
    pool.start()
    loaded.start()
    restore = _stop_on_signals(runner)
    try:
        return run_lines(lines, output, runner, progress)
    finally:
        restore()
        pool.stop()
        loaded.stop()


def _stop_on_signals(runner: BatchRunner) -> Callable[[], object]:
    """SIGTERM / SIGINT: finish what is in flight (a second one: the default, at once)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None              # signals reach the main thread only

    def handler(signum, frame) -> None:
        signal.signal(signum, previous[signum])
        print("\nrun-batch: stopping after the requests in flight (again to quit now)",
              file=sys.stderr)
        runner.stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    return lambda: [signal.signal(sig, old) for sig, old in previous.items()]


def _fail(message: str, code: int) -> int:
    print(f"tlserve run-batch: {message}", file=sys.stderr)
    return code
