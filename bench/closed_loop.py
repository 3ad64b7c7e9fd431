"""The engine under a closed loop of streams, with no HTTP: the latency policy's sweep.

C streams each keep one request in the engine: when a request finishes, its stream sends
the next at once (a chat prompt of 40-100 distinct tokens, 128 output tokens, greedy,
ignore_eos). Stream i's first request is cut to 1 + i*128/C tokens, so that the streams
finish at spread-out times, as independent users do, rather than in waves. The warm-up
lasts until every stream has finished its first request; then the run is timed for
`--seconds`. Every output token's time is taken at the end of the step that made it, so

    output tok/s     output tokens in the window / window
    TTFT p50/p99     requests started in the window: arrival -> first token
    ITL p50/p99      gaps between a request's consecutive tokens (the step times it waited)
    roofline ratio   output tok/s / the numpy roofline at batch min(C, 128), same run
    bound            what a perfect numpy engine could serve for the rows this run really
                     computed per step (decode + prompt rows, K/V read once at full
                     bandwidth; bench/mix_ceiling.py), its ratio to the roofline maths
                     timed beside it, and the engine's tok/s as a share of it

`--burst N` adds, as the window opens, N extra requests of `BURST_PROMPT_TOKENS` prompt
tokens and one output token each (not counted as streams; their TTFT max is reported):
prompts arriving while streams decode, the case the latency policy is for.

Each `--set` is one engine setting (comma-separated key=value of EngineConfig), swept
against every `--streams` value: the table docs/benchmarks.md's sweep and the choice of the
defaults (`max_num_seqs`, `tokens_beside_decode`) come from. The server adds only its
loop thread, which sleeps in select (bench/load_sweep.py measures through HTTP).

    python bench/closed_loop.py --streams 16,64,128 --seconds 40 \\
        --set max_num_seqs=128,tokens_beside_decode=128 --set max_num_seqs=128,tokens_beside_decode=2048
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine.blas_env import OPENBLAS_TIMEOUT_ENV, tune_blas_threads                          # noqa: E402
BLAS_TUNED = tune_blas_threads()     # as tlserve.py does, before numpy loads
from engine.api import Engine, EngineConfig, GenRequest, SamplingParams, load_model, tune_malloc  # noqa: E402
from cli.fetch import DEFAULT_DEST                                                           # noqa: E402
from roofline import ROOFLINE_MAX_BATCH, run_roofline                                        # noqa: E402
from mix_ceiling import MixCeiling, ModelShape, StepMix, bound_row                           # noqa: E402
from load_client import percentile                                                           # noqa: E402

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)
OUTPUT_TOKENS = 128
PROMPT_MIN_TOKENS, PROMPT_SPAN_TOKENS = 40, 61        # prompts of 40..100 tokens
BURST_PROMPT_TOKENS = 512


def prompt_for(n: int) -> tuple[int, ...]:
    """The n-th request's prompt: distinct pseudo-random ordinary tokens (no shared prefix)."""
    length = PROMPT_MIN_TOKENS + (n * 37) % PROMPT_SPAN_TOKENS
    return tuple(1000 + (n * 7919 + j * 104729) % 47000 for j in range(length))


@dataclass
class Window:
    start_s: float
    end_s: float
    output_tokens: int = 0
    prompt_tokens: int = 0
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)
    mix: StepMix = field(default_factory=StepMix)

    def holds(self, t: float) -> bool:
        return self.start_s <= t < self.end_s


def run(model, settings: dict, streams: int, seconds: float, burst: int = 0) -> dict:
    engine = Engine(model, EngineConfig(**settings))
    engine.record_steps = True                    # each step's rows: the mix the bound is timed on
    win = Window(float("inf"), float("inf"))      # opens when the warm-up requests are done
    sent, last_token_s, generated, count = {}, {}, {}, 0
    burst_sent, burst_ttft_s = {}, []

    def send(max_tokens: int = OUTPUT_TOKENS) -> None:
        nonlocal count
        prompt = prompt_for(count)
        count += 1
        rid = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=max_tokens))
        sent[rid] = (time.perf_counter(), len(prompt))

    for i in range(streams):
        send(1 + i * OUTPUT_TOKENS // streams)
    while time.perf_counter() < win.end_s:
        outs = engine.step()
        now = time.perf_counter()
        if win.start_s == float("inf") and count >= 2 * streams:
            win = Window(now, now + seconds)
            for b in range(burst):                  # long prompts arriving all at once
                prompt = tuple(2000 + (b * 131 + j * 7) % 40000 for j in range(BURST_PROMPT_TOKENS))
                burst_sent[engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=1))] = now
        if win.holds(now) and engine.last_step is not None:
            win.mix.steps += 1
            win.mix.rows += engine.last_step.batch_tokens
        for o in outs:
            if o.id in burst_sent:
                burst_ttft_s.append(now - burst_sent.pop(o.id))
                continue
            if o.token is None:
                continue
            arrived_s, prompt_tokens = sent[o.id]
            if win.holds(now):
                win.output_tokens += 1
                if o.id in last_token_s:
                    win.itl_s.append(now - last_token_s[o.id])
                    win.mix.context_positions += prompt_tokens + generated[o.id]   # keys it read
                elif win.holds(arrived_s):
                    win.ttft_s.append(now - arrived_s)
                    win.prompt_tokens += prompt_tokens
            last_token_s[o.id] = now
            generated[o.id] = generated.get(o.id, 0) + 1
            if o.finish is not None:
                del sent[o.id], last_token_s[o.id], generated[o.id]
                send()
    return {"streams": streams, "settings": settings,
            "tok_s": round(win.output_tokens / seconds, 1),
            "prompt_tok_s": round(win.prompt_tokens / seconds, 1),
            "ttft_p50_s": round(percentile(win.ttft_s, 50), 3), "ttft_p99_s": round(percentile(win.ttft_s, 99), 3),
            "itl_p50_s": round(percentile(win.itl_s, 50), 3), "itl_p99_s": round(percentile(win.itl_s, 99), 3),
            "itl_max_s": round(max(win.itl_s, default=float("nan")), 3),
            "mix": replace(win.mix, sampled_rows=win.output_tokens),
            **({"burst": burst, "burst_ttft_max_s": round(max(burst_ttft_s, default=float("nan")), 3)}
               if burst else {})}


def parse_setting(text: str) -> dict:
    out = {}
    for pair in filter(None, text.split(",")):
        key, value = pair.split("=", 1)
        out[key.strip()] = int(value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="16,64,128")
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--set", action="append", default=[], help="EngineConfig key=value,... (repeatable)")
    ap.add_argument("--burst", type=int, default=0, help="extra 512-token prompts as the window opens")
    ap.add_argument("--no-roofline", action="store_true")
    args = ap.parse_args()
    roof = {} if args.no_roofline else run_roofline((OPENBLAS_TIMEOUT_ENV,) if BLAS_TUNED else ())
    tune_malloc()
    model = load_model(ROOT / DEFAULT_DEST)
    rows, ceiling = [], None
    for text in args.set or ["max_num_seqs=128"]:
        for streams in (int(s) for s in args.streams.split(",")):
            row = run(model, {"kv_cache_mib": 1536, **parse_setting(text)}, streams, args.seconds,
                      args.burst)
            batch = min(streams, ROOFLINE_MAX_BATCH)
            ref = roof.get(batch)
            row["roofline_tok_s"] = ref.tok_s if ref else None
            row["ratio"] = round(row["tok_s"] / ref.tok_s, 3) if ref else None
            mix = row.pop("mix")
            if not args.no_roofline:
                ceiling = ceiling or MixCeiling(ModelShape.of(model.config))
                row.update(bound_row(row["tok_s"], mix, ceiling.bound(mix, batch)))
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    for r in rows:
        print(f"{str(r['settings']):<70} C={r['streams']:<4} {r['tok_s']:>6} tok/s  x{r['ratio']}  "
              f"TTFT p50/p99 {r['ttft_p50_s']}/{r['ttft_p99_s']} s  ITL p50/p99 {r['itl_p50_s']}/{r['itl_p99_s']} s"
              + (f"  bound {r['bound_tok_s']} tok/s (x{r['bound_ratio']}), engine at {r['of_bound']} of it"
                 if "bound_tok_s" in r else ""))


if __name__ == "__main__":
    main()
