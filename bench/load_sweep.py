"""A fair serving benchmark: closed-loop streaming load at several concurrencies and server
settings, the numpy roofline in the same run, and two special cases (bench/load_cases.py).

What it measures: C clients each send streaming chat requests back to back (prompts of
~40-100 tokens that differ per request, `max_tokens` 128, temperature 0, `ignore_eos`) for a
duration after a warm-up that is not counted, and prints output tok/s, TTFT p50/p99, ITL
p50/p99 (gaps between a stream's text chunks), requests ok/failed, the client's own CPU
share, and served tok/s over the roofline's tok/s at batch min(C, 128) (bench/roofline.py,
run before any server starts). With our server it also reads the server's counters as the
window opens and closes and times, after the cell, the perfect-engine bound of the rows
computed in it beside the roofline maths (bench/mix_ceiling.py; above 8 streams, where no
speculative drafts are made): "bound x" is the bound over
that roofline, "of bound" the served tok/s over the bound; the two do not drift with the
host the way a roofline timed minutes earlier does. Fair because the server always runs in
a process of its own (our `tlserve.py --config runtime.toml`, spawned per setting, or any OpenAI-compatible URL)
and the client is cheap: one thread, selectors, raw HTTP/1.1 (bench/load_client.py), or
`h2load --h1` (`--client h2load`; `make bench-deps` installs it) as a C cross-check.

    python bench/load_sweep.py --quick                       # smoke run, < 60 s
    python bench/load_sweep.py --concurrency 1,16,64,128,256 \\
        --config-set max_num_seqs=64 --config-set max_num_seqs=128,max_batched_tokens=512
    python bench/load_sweep.py --case prefix                 # cached 400-token prefix vs short
    python bench/load_sweep.py --case spec                   # prompt-lookup on vs off
    python bench/load_sweep.py --url http://127.0.0.1:8080 --model smol --no-roofline

`--set KEY=VALUE` (repeatable) becomes `TL_ENGINE__KEY=VALUE` for every spawned server (a
dot for a nested key: `speculative.method`); each `--config-set 'k=v,k=v'` is one more
server setting to sweep; its pseudo-key `repo=PATH` spawns the server from another
checkout, so two versions alternate in one run (`--config-set repo=../before
--config-set repo=.`: the before/after table). `--before DIR --after DIR --rounds N` runs
the sweep N times on each checkout, alternating (before, after; then after, before; ...),
a fresh server each time, and ends with each concurrency's tok/s per round and the median
over the rounds of after / before (the ratio a refactor must keep near 1):

    python bench/load_sweep.py --client h2load --concurrency 1,16,64,128 \\
        --before ../before --after . --rounds 3

`--no-ignore-eos` for servers that refuse the field (answers may
then be shorter). Prints a table, then one JSON line per cell. Never run by the tests.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import h2load_client                                           # noqa: E402
from bench.load_cases import prefix_case, spec_case                        # noqa: E402
from bench.load_client import run_load, summarize                         # noqa: E402
from bench.load_server import (HIT_COUNTER, PROMPT_COUNTER, STEPS_COUNTER, at_url,  # noqa: E402
                               chat_body, chat_prompt, config_sets, settings_env, spawned)
from bench.mix_ceiling import ROOFLINE_SHAPE, MixCeiling, StepMix, bound_row  # noqa: E402
from bench.roofline import ROOFLINE_MAX_BATCH, run_roofline                # noqa: E402
DRAFTS_MAY_RIDE_UP_TO_STREAMS = 8   # bound rows timed only above this: fewer streams draft most

REPO_KEY = "repo"                 # in a --config-set: spawn tlserve.py from that checkout
CELL_PROMPT_STRIDE = 1_000_000    # each cell's prompts start at its own index: none repeats
H2LOAD_TIMEOUT_S = 3600.0
H2LOAD_WARMUP_STREAMS = 4
QUICK = {"concurrency": "1,4", "max_tokens": 16, "warmup_s": 1.0, "duration_s": 4.0,
         "prefix_rounds": 1, "h2load_rounds": 1}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", choices=("sweep", "prefix", "spec"), default="sweep")
    p.add_argument("--url", default="", help="an OpenAI-compatible server (else: spawn ours)")
    p.add_argument("--model", default="", help="with --url: the model name (default: the first listed)")
    p.add_argument("--api-key", default="")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    p.add_argument("--model-dir", default=None, help="our server's model (default: runtime.toml's)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of every spawned server (TL_ENGINE__KEY=VALUE)")
    p.add_argument("--config-set", action="append", default=[], metavar="'K=V,K=V'",
                   help="one server setting of the sweep (repeatable)")
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--warmup-s", type=float, default=15.0,
                   help="not counted; lasts at least until every client has seen a token")
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--requests", type=int, default=0, help="count mode: this many per cell")
    p.add_argument("--client", choices=("python", "h2load"), default="python")
    p.add_argument("--h2load-rounds", type=int, default=2, help="h2load: runs of one request per connection, each with a new body")
    p.add_argument("--prefix-rounds", type=int, default=3, help="prefix: bursts of each kind")
    p.add_argument("--roofline", action=argparse.BooleanOptionalAction, default=None,
                   help="run the numpy roofline first (default: on, off with --quick)")
    p.add_argument("--quick", action="store_true", help="a smoke run (< 60 s)")
    p.add_argument("--before", type=Path, default=None, help="A/B: the checkout before a change")
    p.add_argument("--after", type=Path, default=None, help="A/B: the checkout after it")
    p.add_argument("--rounds", type=int, default=3, help="A/B: sweeps of each checkout")
    args = p.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    if args.roofline is None:
        args.roofline = not args.quick and args.case == "sweep"
    if args.url and (args.config_set or args.sets or args.case == "spec"):
        p.error("--url measures a server as it runs: no --set, --config-set or --case spec")
    if (args.before is None) != (args.after is None):
        p.error("--before and --after go together")
    if args.before and (args.url or args.config_set or args.case != "sweep"):
        p.error("--before/--after alternate two checkouts of our server in the sweep: "
                "no --url, --config-set or --case")
    return args


@contextmanager
def open_server(args: argparse.Namespace, pairs: list[str]):
    """(Endpoint, Server or None): ours spawned with `pairs` + --set, or the --url one."""
    if args.url:
        yield at_url(args.url, args.model, args.api_key), None
        return
    label = ",".join(pairs) or "defaults"
    repo = [p.split("=", 1)[1] for p in pairs if p.startswith(REPO_KEY + "=")]   # not a config key
    pairs = [p for p in pairs if not p.startswith(REPO_KEY + "=")]
    with spawned(args.model_dir, settings_env(args.sets + pairs), label,
                 Path(repo[-1]).resolve() if repo else None) as pair:
        yield pair


def roofline_at(roof: dict, streams: int) -> tuple[int, float]:
    """The roofline batch nearest min(streams, 128) and its tok/s ((0, 0.0) without one)."""
    if not roof:
        return 0, 0.0
    batch = min(roof, key=lambda b: abs(b - min(streams, ROOFLINE_MAX_BATCH)))
    return batch, roof[batch].tok_s


def measure(endpoint, streams: int, cell: int, args: argparse.Namespace) -> dict:
    base = cell * CELL_PROMPT_STRIDE
    def body(i: int) -> bytes:
        return chat_body(endpoint.model, chat_prompt(base + i), args.max_tokens,
                         ignore_eos=args.ignore_eos)
    if args.client == "h2load":
        # h2load sends one body on every request of a run. A body answered once would be
        # drafted whole from the suffix store the next time, so the warm-up and each
        # measured round get a body of their own: a round is `streams` requests at once.
        warm = min(streams, H2LOAD_WARMUP_STREAMS)        # the server's first requests, uncounted
        h2load_client.run(endpoint.target, body(0), warm, warm, args.max_tokens, H2LOAD_TIMEOUT_S)
        return h2load_client.combined([
            h2load_client.run(endpoint.target, body(1 + r), streams, streams, args.max_tokens,
                              H2LOAD_TIMEOUT_S) for r in range(args.h2load_rounds)], args.max_tokens)
    counters: dict[str, dict[str, float]] = {}

    def on_window(phase: str) -> None:
        counters[phase] = endpoint.metrics()           # {} for a server that is not ours
    result = run_load(endpoint.target, body, streams, warmup_s=args.warmup_s,
                      duration_s=args.duration_s, requests=args.requests, on_window=on_window)
    row = summarize(result)
    if counters.get("open") and counters.get("close"):
        row["mix"] = served_mix(result, counters["open"], counters["close"])
    return row


def served_mix(result, opened: dict[str, float], closed: dict[str, float]) -> StepMix:
    """The rows our server computed in the window, from its counters and the streams.

    Prompt rows: prompt tokens looked up minus those the prefix cache held (counted as
    requests are admitted); sampled rows: the output tokens the client saw; a decode row
    attends over its prompt plus the tokens before it (prompt_tokens from the usage chunk;
    the finished requests' mean for those the window cut). Approximate where a text event
    carries several tokens or a request was preempted (its recomputation is not counted)."""
    t0, t1 = result.start_s, result.end_s
    known = [r.prompt_tokens for r in result.records if r.prompt_tokens]
    mean_prompt = sum(known) / len(known) if known else 0.0
    sampled = firsts = positions = 0.0
    for r in result.records:
        prompt = r.prompt_tokens or mean_prompt
        per_event = r.tokens_per_event
        for index, t in enumerate(r.event_s):
            if t0 <= t <= t1:
                sampled += per_event
                firsts += index == 0                        # made by the prompt's last row
                positions += (prompt + index * per_event) * per_event if index else 0.0
    prompt_rows = ((closed[PROMPT_COUNTER] - opened[PROMPT_COUNTER])
                   - (closed[HIT_COUNTER] - opened[HIT_COUNTER]))
    return StepMix(steps=round(closed[STEPS_COUNTER] - opened[STEPS_COUNTER]),
                   rows=round(prompt_rows + sampled - firsts), sampled_rows=round(sampled),
                   context_positions=round(positions))


def ab_plan(before: Path, after: Path, rounds: int) -> list[tuple[dict, str]]:
    """The servers of an A/B sweep in order: (tags for its rows, its setting); the order of
    the two checkouts flips every round, so neither always runs on a warmer machine."""
    plan = []
    for r in range(rounds):
        sides = (("before", before), ("after", after))
        for side, checkout in sides if r % 2 == 0 else sides[::-1]:
            plan.append(({"round": r, "side": side}, f"{REPO_KEY}={checkout.resolve()}"))
    return plan


def sweep(args: argparse.Namespace, roof: dict) -> list[dict]:
    levels = [int(x) for x in args.concurrency.split(",")]
    rows, ceiling = [], None
    plan = (ab_plan(args.before, args.after, args.rounds) if args.before
            else [({}, setting) for setting in args.config_set or [""]])
    for tags, setting in plan:
        pairs = config_sets(setting)
        with open_server(args, pairs) as (endpoint, server):
            for streams in levels:
                row = {"case": "sweep", "client": args.client, "server": endpoint.label,
                       "settings": ",".join(args.sets + pairs) or "defaults", "streams": streams,
                       **tags}
                row.update(measure(endpoint, streams, len(rows), args))
                batch, roof_tok_s = roofline_at(roof, streams)
                if batch:
                    row.update(roofline_batch=batch, roofline_tok_s=roof_tok_s,
                               ratio_to_roofline=round(row["tok_s"] / roof_tok_s, 3))
                endpoint.settle(server)
                mix = row.pop("mix", None)
                # timed with the server idle; not where the server may draft: the drafts'
                # rows are in no counter, and a step's tokens can exceed its rows
                if mix is not None and args.roofline and streams > DRAFTS_MAY_RIDE_UP_TO_STREAMS:
                    ceiling = ceiling or MixCeiling(ROOFLINE_SHAPE)
                    bound = ceiling.bound(mix, min(streams, ROOFLINE_MAX_BATCH))
                    row.update(bound_row(row["tok_s"], mix, bound))
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)     # progress
    return rows


def print_sweep(rows: list[dict]) -> None:
    """One row per (settings, streams); h2load's rows show time to first byte, mean and max."""
    h2load = rows and rows[0]["client"] == "h2load"
    first = ("ttfb_mean_s", "ttfb_max_s") if h2load else ("ttft_p50_s", "ttft_p99_s")
    cols = (("streams", 8), ("tok_s", 9), (first[0], 11), (first[1], 11),
            ("itl_p50_s", 10), ("itl_p99_s", 10), ("requests_ok", 6), ("requests_failed", 7),
            ("client_cpu_share", 8), ("ratio_to_roofline", 9), ("bound_ratio", 9), ("of_bound", 9))
    heads = ("streams", "tok/s", "TTFB mean" if h2load else "TTFT p50",
             "TTFB max" if h2load else "TTFT p99", "ITL p50", "ITL p99", "ok", "failed",
             "cli CPU", "x roof", "bound x", "of bound")
    print(f"{'settings':<40}" + "".join(f"{h:>{w}}" for h, (_, w) in zip(heads, cols)))
    for r in rows:
        cells = (r.get(k) for k, _ in cols)
        label = f"{r['side']} {r['round'] + 1}: {r['settings']}" if "side" in r else r["settings"]
        print(f"{label[:39]:<40}" + "".join(f"{'-' if v is None else v!s:>{w}}"
                                                    for v, (_, w) in zip(cells, cols)))
    for r in rows:
        print(json.dumps(r))


def ab_summary(rows: list[dict]) -> list[dict]:
    """Per concurrency of an A/B sweep: tok/s of each side per round, after / before per
    round, and the median of those ratios."""
    out = []
    for streams in sorted({r["streams"] for r in rows}):
        tok_s = {(r["round"], r["side"]): r["tok_s"] for r in rows if r["streams"] == streams}
        rounds = sorted({k[0] for k in tok_s})
        before = [tok_s[(n, "before")] for n in rounds]
        after = [tok_s[(n, "after")] for n in rounds]
        ratios = [round(a / b, 3) for a, b in zip(after, before)]
        out.append({"streams": streams, "before_tok_s": before, "after_tok_s": after,
                    "ratios": ratios, "median_ratio": statistics.median(ratios)})
    return out


def print_ab(summary: list[dict]) -> None:
    print(f"{'streams':>8}  {'before tok/s per round':<28}{'after tok/s per round':<28}"
          f"{'after/before':<22}{'median':>7}")
    for s in summary:
        print(f"{s['streams']:>8}  {' '.join(map(str, s['before_tok_s'])):<28}"
              f"{' '.join(map(str, s['after_tok_s'])):<28}{' '.join(map(str, s['ratios'])):<22}"
              f"{s['median_ratio']:>7}")
    for s in summary:
        print(json.dumps({"ab": s}))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.client == "h2load" and not h2load_client.available():
        raise SystemExit("h2load not found: `make bench-deps` installs Debian's nghttp2-client")
    roof = run_roofline() if args.roofline else {}     # before any server: nothing else runs
    if args.case == "sweep":
        rows = sweep(args, roof)
        print_sweep(rows)
        if args.before:
            print_ab(ab_summary(rows))
    elif args.case == "prefix":
        for setting in args.config_set or [""]:          # e.g. repo=../before, repo=.
            print(f"# prefix case: {setting or 'defaults'}")
            prefix_case(args, lambda a, pairs, more=config_sets(setting): open_server(a, pairs + more))
    else:
        spec_case(args, open_server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
