"""The loop thread under heavy requests: its worst stall, health latency, streams' gaps.

    python bench/loop_stall.py [--model-dir DIR] [--streams 4] [--embedding-inputs 2048]
                               [--set key=value,...] [--repo DIR]

Starts our server (`tlserve.py --config runtime.toml`, bench/load_server.py's `spawned`:
a child process on free ports), opens `--streams` streaming chats, and while they run sends
the heavy requests below one after another:

* the Zod int schema as `response_format` (its grammar takes seconds to compile or refuse);
* a chat with a huge history (`MAX_MESSAGES` messages, a body near the 8 MiB limit);
* `/v1/embeddings` with `MAX_EMBEDDING_INPUTS` inputs, float encoding (a ~20 MB document);
* `/tokenize` of a prompt near the body limit.

Meanwhile a prober reads /healthz, /readyz and /metrics on the health port in turn. It
prints, per heavy request, its status and time, the probes' largest latency and the
streams' largest inter-token gap while it ran (a gap during the embeddings call is mostly
the engine thread running the inputs, not the loop); then the loop's worst stall
(`tl_loop_stall_seconds_max`, before and after the heavy phase) and the probes' largest
latency per path. It prints; comparing two versions is the reader's job (`--repo` runs another
checkout's server, e.g. a worktree of the version before; one without the stall meter
prints n/a for it).
"""
from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load_server import config_sets, settings_env, spawned  # noqa: E402
from server.api.chat.request import MAX_MESSAGES  # noqa: E402
from server.api.embeddings import MAX_EMBEDDING_INPUTS  # noqa: E402

ZOD_INT = {"type": "object", "properties": {"n": {"type": "integer",
                                                  "minimum": -9007199254740991,
                                                  "maximum": 9007199254740991}},
           "required": ["n"]}
BODY_TARGET_BYTES = 7 * 2**20        # under the 8 MiB request limit, with room for JSON
STREAM_MAX_TOKENS = 4096             # streams outlive the heavy phase; cut when it ends
EMBED_INPUT = "the lighthouse keeper kept a lantern by the harbour"
PROBE_PATHS = ("/healthz", "/readyz", "/metrics")
HTTP_TIMEOUT_S = 600.0
PROBE_INTERVAL_S = 0.02              # a probe every 20 ms: a busy scraper, not a flood
BASELINE_S = 3.0                     # the streams' gaps before the heavy phase, to compare
STALL_METRIC = "tl_loop_stall_seconds_max"
STALL_CPU_METRIC = "tl_loop_stall_cpu_seconds_max"


@dataclass
class StreamGaps:
    """The arrival times of one stream's SSE events."""
    arrivals_s: list[float] = field(default_factory=list)

    def largest_gap_s(self, start_s: float, end_s: float) -> float:
        """The largest gap between events that touches [start_s, end_s]."""
        times = [t for t in self.arrivals_s if t <= end_s]
        edges = [t for t in times if t < start_s][-1:] + [t for t in times if t >= start_s]
        later = [t for t in self.arrivals_s if t > end_s][:1]
        edges += later or [end_s]
        return max((b - a for a, b in zip(edges, edges[1:])), default=0.0)


def _post(host: str, port: int, path: str, body: bytes, timeout_s: float = HTTP_TIMEOUT_S
          ) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    return conn.getresponse()


def run_stream(host: str, port: int, model: str, gaps: StreamGaps, stop: threading.Event):
    body = json.dumps({"model": model, "stream": True, "max_tokens": STREAM_MAX_TOKENS,
                       "ignore_eos": True, "temperature": 0,
                       "messages": [{"role": "user", "content": "Tell me a long story."}]})
    response = _post(host, port, "/v1/chat/completions", body.encode())
    while not stop.is_set():
        line = response.readline()
        if not line:
            return
        if line.startswith(b"data: "):
            gaps.arrivals_s.append(time.monotonic())
    response.close()


@dataclass(frozen=True)
class Probe:
    path: str
    sent_s: float
    took_s: float


def probe(health_url: str, stop: threading.Event, probes: list[Probe]) -> None:
    host, port = health_url.removeprefix("http://").rsplit(":", 1)
    while not stop.is_set():
        for path in PROBE_PATHS:
            conn = http.client.HTTPConnection(host, int(port), timeout=HTTP_TIMEOUT_S)
            sent_s = time.monotonic()
            conn.request("GET", path)
            conn.getresponse().read()
            probes.append(Probe(path, sent_s, time.monotonic() - sent_s))
            conn.close()
            stop.wait(PROBE_INTERVAL_S)


def worst_probe_s(probes: list[Probe], start_s: float, end_s: float, path: str = "") -> float:
    """The slowest probe (of `path`, or any) that was sent in [start_s, end_s]."""
    return max((p.took_s for p in probes if start_s <= p.sent_s <= end_s
                and (not path or p.path == path)), default=0.0)


@dataclass(frozen=True)
class Heavy:
    label: str
    status: int
    error: str                   # the error code of a refusal ("" when 200)
    start_s: float
    end_s: float
    answer_bytes: int


def heavy_requests(model: str, embedding_inputs: int) -> list[tuple[str, str, dict]]:
    """(label, path, body) of each heavy request, at the largest size the server accepts."""
    zod = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "n?"}],
           "response_format": {"type": "json_schema",
                               "json_schema": {"name": "zod", "schema": ZOD_INT}}}
    turn_chars = BODY_TARGET_BYTES // MAX_MESSAGES - 64
    history = [{"role": "user" if i % 2 == 0 else "assistant",
                "content": ("story %d " % i + "word " * turn_chars)[:turn_chars]}
               for i in range(MAX_MESSAGES - 1)] + [{"role": "user", "content": "Go on."}]
    chat = {"model": model, "max_tokens": 8, "messages": history}
    embeddings = {"model": model, "encoding_format": "float",
                  "input": [f"{EMBED_INPUT} {i}" for i in range(embedding_inputs)]}
    tokenize = {"model": model, "prompt": "word " * (BODY_TARGET_BYTES // 5)}
    return [("zod int schema (response_format)", "/v1/chat/completions", zod),
            (f"chat, {MAX_MESSAGES}-message history", "/v1/chat/completions", chat),
            (f"embeddings, {embedding_inputs} float inputs", "/v1/embeddings", embeddings),
            ("tokenize, a 7 MB prompt", "/v1/tokenize", tokenize)]


def send_heavy(host: str, port: int, model: str, embedding_inputs: int) -> list[Heavy]:
    rows = []
    for label, path, document in heavy_requests(model, embedding_inputs):
        body = json.dumps(document).encode()
        sent_s = time.monotonic()
        response = _post(host, port, path, body)
        answer = response.read()
        code = json.loads(answer)["error"]["code"] if response.status >= 400 else ""
        rows.append(Heavy(label, response.status, code, sent_s, time.monotonic(), len(answer)))
    return rows


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", default=None, help="default: runtime.toml's model_dir")
    p.add_argument("--streams", type=int, default=4, help="streaming chats during the run")
    p.add_argument("--embedding-inputs", type=int, default=MAX_EMBEDDING_INPUTS,
                   help="inputs of the embeddings call (the engine runs them all: minutes)")
    p.add_argument("--set", default="", help="engine settings, key=value,... (TL_ENGINE__)")
    p.add_argument("--repo", type=Path, default=None, help="the checkout whose server runs")
    args = p.parse_args(argv)
    with spawned(args.model_dir, settings_env(config_sets(args.set)), "loop_stall",
                 repo=args.repo.resolve() if args.repo else None) as (endpoint, _):
        host, port = endpoint.target.host, endpoint.target.port
        stop = threading.Event()
        gaps = [StreamGaps() for _ in range(args.streams)]
        streams = [threading.Thread(target=run_stream, daemon=True,
                                    args=(host, port, endpoint.model, g, stop)) for g in gaps]
        for thread in streams:
            thread.start()
        while not all(g.arrivals_s for g in gaps):      # every stream has its first token
            time.sleep(0.05)
        time.sleep(BASELINE_S)                          # the streams' gaps with nothing heavy
        stall_before = endpoint.metrics()
        probes: list[Probe] = []
        prober = threading.Thread(target=probe, args=(endpoint.health_url, stop, probes),
                                  daemon=True)
        prober.start()
        rows = send_heavy(host, port, endpoint.model, args.embedding_inputs)
        stop.set()
        prober.join(HTTP_TIMEOUT_S)
        stall_after = endpoint.metrics()
    report(rows, gaps, probes, stall_before, stall_after)
    return 0


def report(rows: list[Heavy], gaps: list[StreamGaps], probes: list[Probe],
           before: dict[str, float], after: dict[str, float]) -> None:
    print(f"{'heavy request':38} {'status':>6} {'seconds':>8} {'bytes':>9} {'probe max':>10} "
          f"{'stream gap max':>15}  error")
    for h in rows:
        gap_s = max((g.largest_gap_s(h.start_s, h.end_s) for g in gaps), default=0.0)
        print(f"{h.label:38} {h.status:>6} {h.end_s - h.start_s:>8.2f} {h.answer_bytes:>9} "
              f"{worst_probe_s(probes, h.start_s, h.end_s) * 1000:>7.1f} ms "
              f"{gap_s * 1000:>12.1f} ms  {h.error}")
    start_s, end_s = rows[0].start_s, rows[-1].end_s
    baseline_s = max((g.largest_gap_s(start_s - BASELINE_S, start_s) for g in gaps), default=0.0)
    print(f"streams' largest gap in the {BASELINE_S:.0f} s before: {baseline_s * 1000:.1f} ms")
    def ms(sample: dict[str, float], name: str) -> str:
        return f"{sample[name] * 1000:.1f} ms" if name in sample else "n/a"
    print(f"loop worst stall ({STALL_METRIC}, wall; {STALL_CPU_METRIC}, the loop thread's "
          f"CPU): {ms(before, STALL_METRIC)} / {ms(before, STALL_CPU_METRIC)} before the heavy "
          f"phase, {ms(after, STALL_METRIC)} / {ms(after, STALL_CPU_METRIC)} after it "
          f"({end_s - start_s:.1f} s, {len(gaps)} streams running)")
    print(f"probe latency max over {len(probes)} probes: " + ", ".join(
        f"{path} {worst_probe_s(probes, start_s, end_s, path) * 1000:.1f} ms"
        for path in PROBE_PATHS))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
