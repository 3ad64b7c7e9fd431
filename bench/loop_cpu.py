"""The loop thread's own CPU time per engine step, under many streams, for two checkouts.

    python bench/loop_cpu.py --before ../before --after . [--streams 128] [--max-tokens 64]
                             [--rounds 2] [--model-dir DIR]

The loop thread (the server's main thread: sockets, HTTP, rendering) and the engine thread
share two cores and one GIL; every millisecond the loop spends per step is a millisecond
the step's Python half cannot have. This bench starts each checkout's server in turn
(bench/load_server.py's `spawned`, speculation off so every step is one token a stream),
runs `--streams` streaming chats at once with h2load (one connection each, `ignore_eos`,
`--max-tokens` tokens), and reads, before and after the run, the loop thread's CPU time
from /proc (utime + stime of the thread whose id is the server's pid) and the engine's
`tl_engine_steps_total` from /metrics. It prints, per checkout and round, the loop's CPU
milliseconds per engine step and the process's, and at the end the median ratio
after / before (lower is better). The checkouts alternate, so a noisy machine spreads over
both. h2load sends one body on every request: the prompt is the same for all streams, but
none is ever sent twice to one server process after it has been answered (each round
starts a fresh server).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import h2load_client  # noqa: E402
from bench.load_server import chat_body, spawned  # noqa: E402

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
STEPS_METRIC = "tl_engine_steps_total"
SPECULATION_OFF = {"TL_ENGINE__SPECULATIVE": "none"}
RUN_TIMEOUT_S = 900.0


def cpu_s(stat: Path) -> float:
    """utime + stime, seconds, of a /proc stat file (its fields 14 and 15)."""
    text = stat.read_text()
    fields = text[text.rindex(")") + 2:].split()        # after "(comm)": field 3 on
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def thread_cpu_s(pid: int, tid: int) -> float:
    return cpu_s(Path(f"/proc/{pid}/task/{tid}/stat"))


def process_cpu_s(pid: int) -> float:
    return cpu_s(Path(f"/proc/{pid}/stat"))


def one_run(repo: Path, args) -> dict:
    """One fresh server of `repo`, one h2load run: the loop's and the process's CPU per step."""
    with spawned(args.model_dir, SPECULATION_OFF, repo.name, repo=repo) as (endpoint, server):
        pid = server.proc.pid
        body = chat_body(endpoint.model, "Tell me a long story about a lighthouse.",
                         args.max_tokens)
        steps_0, loop_0, proc_0 = (endpoint.metrics()[STEPS_METRIC], thread_cpu_s(pid, pid),
                                   process_cpu_s(pid))
        load = h2load_client.run(endpoint.target, body, args.streams, args.streams,
                                 args.max_tokens, RUN_TIMEOUT_S)
        steps = endpoint.metrics()[STEPS_METRIC] - steps_0
        loop_s, proc_s = thread_cpu_s(pid, pid) - loop_0, process_cpu_s(pid) - proc_0
    if load["requests_failed"] or steps <= 0:
        raise SystemExit(f"{repo}: a bad run: {load}, {steps} steps")
    return {"steps": int(steps), "loop_ms_per_step": 1000 * loop_s / steps,
            "process_ms_per_step": 1000 * proc_s / steps, "tok_s": load["tok_s"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, required=True, help="the checkout before the change")
    p.add_argument("--after", type=Path, required=True, help="the checkout after it")
    p.add_argument("--streams", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--model-dir", default=None, help="default: runtime.toml's model_dir")
    args = p.parse_args()
    if not h2load_client.available():
        raise SystemExit("h2load not found: apt-get install nghttp2-client (make bench-deps)")
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    print(f"# {args.streams} streams x {args.max_tokens} tokens, speculation off, "
          f"{args.rounds} rounds, checkouts alternating")
    for round_ in range(args.rounds):
        for name in ("before", "after"):
            result = one_run(getattr(args, name).resolve(), args)
            runs[name].append(result)
            print(f"round {round_ + 1} {name:6s}: loop {result['loop_ms_per_step']:.2f} ms/step, "
                  f"process {result['process_ms_per_step']:.2f} ms/step, "
                  f"{result['steps']} steps, {result['tok_s']} tok/s", flush=True)
    median = {name: statistics.median(r["loop_ms_per_step"] for r in rs)
              for name, rs in runs.items()}
    tok_s = {name: statistics.median(r["tok_s"] for r in rs) for name, rs in runs.items()}
    print(f"loop CPU per step, median: before {median['before']:.2f} ms, after "
          f"{median['after']:.2f} ms, after/before {median['after'] / median['before']:.3f}")
    print(f"tok/s, median: before {tok_s['before']}, after {tok_s['after']}, "
          f"after/before {tok_s['after'] / tok_s['before']:.3f}")


if __name__ == "__main__":
    main()
