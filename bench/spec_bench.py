"""Speculation off vs on, per task, at 1, 4 and 16 streams; llama-server beside it on demand.

Issue 24's benchmark. Four tasks of fixed, purpose-written requests (bench/spec_tasks.py:
edit with a predicted output, extract into a JSON Schema, a 10-turn agent loop with two
tools, plain chat). Our server runs twice, both started once before anything is measured
and kept up: "off" (`speculative = "none"`) and "on" (runtime.toml's default), each in a
process of its own (bench/load_server.py's `spawned`); with `--llama` or `--url` a third,
llama-server on the same GGUF, which gets the same requests less `prediction`.

A cell is (task, streams): N clients each sending that task's requests back to back
(closed loop, bench/load_client.py's `run_load` in count mode: at least `--per-stream`
requests per client and the task's minimum, a whole agent loop), and its figure is output
tok/s of whole requests: completion tokens from the usage chunks over the time from the
first send to the last byte. Every server gets a warm-up first (`--warmup-requests` of each
task, not counted). Then the cell runs `--runs` times, alternating the servers (off, on,
llama, off, on, llama, ...) with the same requests in each round; the table shows the median
tok/s per server, on/off, the acceptance rate (drafted vs accepted tokens from the "on"
server's /metrics across the cell, per draft source where the server exposes one; "-" when
it exposes none), and ours (on) over llama-server. One JSON line per cell follows the table.

    python bench/spec_bench.py --quick                          # smoke run, < 2 min
    python bench/spec_bench.py                                  # off vs on, 1/4/16 streams, 3 runs
    python bench/spec_bench.py --llama                          # + llama-server (make bench-deps)
    python bench/spec_bench.py --url http://127.0.0.1:8080      # + a llama-server already running
    python bench/spec_bench.py --tasks edit,agent --streams 1 --runs 5

`--llama` starts .bench/llama.cpp/build/bin/llama-server (`--llama-bin` for another) with
`-t 2 --parallel <max streams> --cont-batching --jinja` (tools need its jinja templates) on
artifacts/models/smol-135m's GGUF. Never run by the tests (tests/bench/test_spec_tasks.py
checks the tasks and this module's arithmetic).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.child_server import Server                                    # noqa: E402
from bench.family_speed import LLAMA_SERVER, gguf_of, llama_server       # noqa: E402
from bench.load_client import LoadResult, run_load                       # noqa: E402
from bench.load_server import Endpoint, at_url, settings_env, spawned    # noqa: E402
from bench.spec_tasks import Task, tasks                                 # noqa: E402

OFF, ON, LLAMA = "off", "on", "llama"
OURS = {OFF: ["speculative=none"], ON: []}     # ON: runtime.toml's default speculation
LLAMA_MODEL = "smol-135m"
CELL_STRIDE = 1_000_000          # each cell's chat prompts start at their own index
# /metrics samples of drafted / accepted speculative tokens, whatever their exact names:
# tl_..spec..draft..{source="x"} and tl_..spec..accept..{source="x"} (the label optional)
SPEC_SAMPLE = re.compile(r'^tl_\w*spec\w*?(draft|accept)\w*(?:\{(.*)\})?$')
SOURCE_LABEL = re.compile(r'source="([^"]*)"')
ALL_SOURCES = "all"
QUICK = {"streams": "1,4", "runs": 1, "per_stream": 1, "warmup_requests": 1,
         "max_tokens_cap": 32, "min_requests": False}


@dataclass(frozen=True)
class Contender:
    """A server in the alternation: its name (off / on / llama) and where it listens."""
    name: str
    endpoint: Endpoint
    server: Server | None = None     # ours: its /metrics is read around each cell

    @property
    def foreign(self) -> bool:
        return self.server is None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="edit,extract,agent,chat")
    p.add_argument("--streams", default="1,4,16")
    p.add_argument("--runs", type=int, default=3, help="alternating runs per cell (median)")
    p.add_argument("--per-stream", type=int, default=2, help="requests per client and run")
    p.add_argument("--warmup-requests", type=int, default=2, help="per task and server")
    p.add_argument("--max-tokens-cap", type=int, default=0, help="cap every max_tokens (0: none)")
    p.add_argument("--model-dir", default=None, help="our server's model (default: runtime.toml's)")
    p.add_argument("--llama", action="store_true", help="start llama-server beside ours")
    p.add_argument("--llama-bin", type=Path, default=LLAMA_SERVER)
    p.add_argument("--llama-threads", type=int, default=2)
    p.add_argument("--url", default="", help="a llama-server (or any OpenAI server) already up")
    p.add_argument("--only-url", action="store_true", help="measure the --url server alone")
    p.add_argument("--quick", action="store_true", help="a smoke run (< 2 min)")
    args = p.parse_args(argv)
    args.min_requests = True
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    if args.llama and args.url:
        p.error("--llama starts a llama-server; --url measures one already running: one of them")
    if args.only_url and not args.url:
        p.error("--only-url needs --url")
    return args


def open_contenders(stack: ExitStack, args: argparse.Namespace, streams: int) -> list[Contender]:
    """Every server of the run, all started (and warm-up free) before the first cell."""
    out = []
    if not args.only_url:
        for name, pairs in OURS.items():
            endpoint, server = stack.enter_context(
                spawned(args.model_dir, settings_env(pairs), name))
            out.append(Contender(name, endpoint, server))
    if args.llama:
        endpoint, _ = stack.enter_context(llama_server(
            gguf_of(LLAMA_MODEL), ("--jinja",), parallel=streams, threads=args.llama_threads,
            binary=args.llama_bin))
        out.append(Contender(LLAMA, endpoint))
    elif args.url:
        out.append(Contender(LLAMA, at_url(args.url, "", "")))
    return out


def body_maker(task: Task, contender: Contender, base: int, cap: int):
    """make_body(i) for run_load: request base + i of the task, max_tokens capped if `cap`."""
    def make(i: int) -> bytes:
        body = task.body(base + i, contender.endpoint.model, contender.foreign)
        if not cap:
            return body
        doc = json.loads(body)
        doc["max_tokens"] = min(doc["max_tokens"], cap)
        return json.dumps(doc).encode()
    return make


def whole_requests(result: LoadResult) -> dict:
    """Output tok/s of whole requests: usage completion tokens of the requests that ended
    well, over first send to last byte; how many ended well, failed, or had no usage."""
    records = result.records
    ok = [r for r in records if r.ok]
    tokens = sum(r.usage_tokens for r in ok)
    span_s = (max((r.ended_s for r in records), default=0.0)
              - min((r.sent_s for r in records), default=0.0))
    return {"tok_s": round(tokens / span_s, 2) if span_s > 0 else 0.0,
            "completion_tokens": tokens, "seconds": round(span_s, 3), "requests_ok": len(ok),
            "requests_failed": len(records) - len(ok),
            "without_usage": sum(1 for r in ok if not r.usage_tokens)}


def spec_counts(samples: dict[str, float]) -> dict[str, list[float]]:
    """{source: [drafted, accepted]} from /metrics samples (ALL_SOURCES for unlabelled ones)."""
    out: dict[str, list[float]] = {}
    for name, value in samples.items():
        match = SPEC_SAMPLE.match(name)
        if not match:
            continue
        label = SOURCE_LABEL.search(match.group(2) or "")
        source = label.group(1) if label else ALL_SOURCES
        out.setdefault(source, [0.0, 0.0])[match.group(1) == "accept"] += value
    return out


def spec_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, list[float]]:
    """Drafted / accepted tokens per source between two /metrics reads."""
    early, late = spec_counts(before), spec_counts(after)
    return {s: [late[s][0] - early.get(s, [0.0, 0.0])[0], late[s][1] - early.get(s, [0.0, 0.0])[1]]
            for s in late}


def acceptance(by_source: dict[str, list[float]]) -> float | None:
    """Accepted over drafted: the unlabelled totals if the server has them, else the sum of
    the sources; None when nothing was drafted (or no counters exist)."""
    pairs = ([by_source[ALL_SOURCES]] if ALL_SOURCES in by_source else list(by_source.values()))
    drafted = sum(p[0] for p in pairs)
    return round(sum(p[1] for p in pairs) / drafted, 3) if drafted > 0 else None


def cell_requests(task: Task, streams: int, args: argparse.Namespace) -> int:
    wanted = streams * args.per_stream
    return max(wanted, task.min_requests) if args.min_requests else wanted


def warm_up(contenders: list[Contender], chosen: dict[str, Task], args) -> None:
    for contender in contenders:
        for task in chosen.values():
            run_load(contender.endpoint.target,
                     body_maker(task, contender, CELL_STRIDE - args.warmup_requests,
                                args.max_tokens_cap), 1, requests=args.warmup_requests)


def measure_cell(contenders: list[Contender], task: Task, streams: int, cell: int,
                 args) -> dict:
    """The cell's alternating runs: every contender's per-run figures and, for ours, the
    drafted / accepted tokens across its runs."""
    count = cell_requests(task, streams, args)
    runs = {c.name: [] for c in contenders}
    drafts = {c.name: {} for c in contenders if not c.foreign}
    for run in range(args.runs):
        base = cell * CELL_STRIDE + run * count        # the same requests for every server
        for contender in contenders:
            before = contender.endpoint.metrics()          # {} for a foreign server
            result = run_load(contender.endpoint.target,
                              body_maker(task, contender, base, args.max_tokens_cap),
                              streams, requests=count)
            runs[contender.name].append(whole_requests(result))
            if not contender.foreign:
                for source, (d, a) in spec_delta(before, contender.endpoint.metrics()).items():
                    total = drafts[contender.name].setdefault(source, [0.0, 0.0])
                    total[0] += d
                    total[1] += a
    return summarize_cell(task.name, streams, count, runs, drafts)


def summarize_cell(task: str, streams: int, count: int, runs: dict[str, list[dict]],
                   drafts: dict[str, dict[str, list[float]]]) -> dict:
    """The cell's row: median tok/s per server, the ratios, acceptance of the "on" server."""
    row: dict = {"task": task, "streams": streams, "requests_per_run": count}
    for name, figures in runs.items():
        row[name] = {"tok_s_median": statistics.median(f["tok_s"] for f in figures),
                     "runs": figures}
    med = {name: row[name]["tok_s_median"] for name in runs}
    if med.get(OFF) and ON in med:
        row["on_over_off"] = round(med[ON] / med[OFF], 3)
    if med.get(LLAMA) and ON in med:
        row["on_over_llama"] = round(med[ON] / med[LLAMA], 3)
    if ON in drafts:
        row["acceptance"] = acceptance(drafts[ON])
        row["drafts_by_source"] = {s: {"drafted": d, "accepted": a}
                                   for s, (d, a) in drafts[ON].items()}
    return row


def table(rows: list[dict]) -> list[str]:
    """task x streams: off tok/s, on tok/s, on/off, acceptance, llama tok/s, ours(on)/llama."""
    def cell(row: dict, key: str) -> str:
        value = row.get(key)
        value = value["tok_s_median"] if isinstance(value, dict) else value
        return "-" if value is None else f"{value:g}"
    heads = ("task", "streams", "off tok/s", "on tok/s", "on/off", "accept", "llama tok/s",
             "on/llama")
    keys = (OFF, ON, "on_over_off", "acceptance", LLAMA, "on_over_llama")
    lines = [f"{heads[0]:<9}{heads[1]:>8}" + "".join(f"{h:>12}" for h in heads[2:])]
    for r in rows:
        lines.append(f"{r['task']:<9}{r['streams']:>8}" + "".join(f"{cell(r, k):>12}" for k in keys))
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    everything = tasks()
    chosen = {name: everything[name] for name in args.tasks.split(",")}
    levels = [int(x) for x in args.streams.split(",")]
    rows = []
    with ExitStack() as stack:
        contenders = open_contenders(stack, args, max(levels))
        warm_up(contenders, chosen, args)
        for task in chosen.values():
            for streams in levels:
                rows.append(measure_cell(contenders, task, streams, len(rows), args))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)     # progress
    print("\n".join(table(rows)))
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
