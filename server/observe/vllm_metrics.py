"""The model-server protocol: what tl-serve measures, also under vLLM's Prometheus names.

Routers and dashboards written for vLLM read `vllm:*` names. The Gateway API Inference
Extension's endpoint picker scrapes `vllm:num_requests_waiting`, `vllm:num_requests_running`,
`vllm:kv_cache_usage_perc` (a 0-1 fraction) and, for its prefix scorer's picture of each
replica's cache, `vllm:cache_config_info{block_size,num_gpu_blocks}`; Grafana boards for vLLM
read the latency histograms and the token counters. This module writes those families from
the very numbers of the `tl_*` ones (server/observe/metrics.py), every sample labelled
`model_name` (the served model id). Names, types and bucket bounds are vLLM's: counters end
in `_total` on the page, info metrics are gauges fixed at 1 that carry their facts as labels,
and each histogram has vLLM's bounds (TTFT from 1 ms, inter-token from 10 ms, the request
phases from 0.3 s), so a board's `histogram_quantile` reads the same buckets.

A request's phases, on the bridge's clock (server/worker/bridge.py's `Ticket`):

    arrival -> started (its first engine step) -> first token -> last token
    queue = started - arrival     prefill = first token - started     decode = last - first
    inference = last token - started               e2e = last token - arrival

Inter-token latency is one observation per engine step that brought a stream new tokens
after its first: the time since the previous such step (a speculative step's several
tokens arrive together: one gap), never a request's mean time per token.

`vllm:lora_requests_info{max_lora, running_lora_adapters, waiting_lora_adapters}` is the
inference gateway's LoRA affinity signal: per chat engine, the most adapters one step holds
and the adapters (comma-separated names) of its running and waiting requests. vLLM sets its
value to the time of the reading and the gateway keeps the largest; tl-serve writes one
sample per engine per scrape, valued 1 like the other info metrics. Per-adapter request
series need nothing here: a request's `model_name` is the adapter's name when it named one
(the request families below), as vLLM's `/v1/models` names it.

Not written: the finish reason `abort` (a cancelled stream is not observed here), so `vllm:request_success_total`
counts `stop` and `length`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from engine.api import FINISH_LENGTH, FINISH_STOP, EngineStats, KvSize
from server.observe.prom_text import Histogram, Labels, family, histogram_family

TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                         2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                     50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
FINISHED_REASONS = (FINISH_STOP, FINISH_LENGTH)     # vLLM's engine-level reasons we count

# (name, help, bounds) of each request histogram, in page order
REQUEST_HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", "Time from arrival to the first output token.",
     TTFT_BUCKETS_S),
    ("vllm:inter_token_latency_seconds",
     "Time between consecutive engine steps that gave a stream new output tokens.",
     INTER_TOKEN_BUCKETS_S),
    ("vllm:e2e_request_latency_seconds", "Time from arrival to the last output token.",
     REQUEST_BUCKETS_S),
    ("vllm:request_queue_time_seconds",
     "Time from arrival to the request's first engine step (waiting).", REQUEST_BUCKETS_S),
    ("vllm:request_prefill_time_seconds",
     "Time from the first engine step to the first output token (prefill).",
     REQUEST_BUCKETS_S),
    ("vllm:request_decode_time_seconds",
     "Time from the first to the last output token (decode).", REQUEST_BUCKETS_S),
    ("vllm:request_inference_time_seconds",
     "Time from the first engine step to the last output token (running).",
     REQUEST_BUCKETS_S),
)


@dataclass(frozen=True, kw_only=True)
class FinishedRequest:
    """One generation as the stream saw it at its end (seconds; None: that phase never
    happened, e.g. no token at all)."""
    model: str                              # the served model id
    prompt_tokens: int
    completion_tokens: int
    e2e_s: float
    finish_reason: str | None = None        # the API's: stop, length, tool_calls
    ttft_s: float | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    token_gaps_s: tuple[float, ...] = ()    # the inter-token latencies of its stream

    @property
    def inference_s(self) -> float | None:
        if self.prefill_s is None or self.decode_s is None:
            return None
        return self.prefill_s + self.decode_s


class ModelRequests:
    """One served model's request series under vLLM's names (loop thread only)."""

    def __init__(self):
        self.histograms = {name: Histogram(name, help_text, bounds)
                           for name, help_text, bounds in REQUEST_HISTOGRAMS}
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = dict.fromkeys(FINISHED_REASONS, 0)

    def observe(self, done: FinishedRequest) -> None:
        self.prompt_tokens += done.prompt_tokens
        self.generation_tokens += done.completion_tokens
        if done.finish_reason is not None:
            # tool_calls and a stop string end the engine request as a stop does
            reason = FINISH_LENGTH if done.finish_reason == FINISH_LENGTH else FINISH_STOP
            self.finished[reason] += 1
        h = self.histograms
        for name, value in (("vllm:time_to_first_token_seconds", done.ttft_s),
                            ("vllm:e2e_request_latency_seconds", done.e2e_s),
                            ("vllm:request_queue_time_seconds", done.queue_s),
                            ("vllm:request_prefill_time_seconds", done.prefill_s),
                            ("vllm:request_decode_time_seconds", done.decode_s),
                            ("vllm:request_inference_time_seconds", done.inference_s)):
            if value is not None:
                h[name].observe(value)
        for gap_s in done.token_gaps_s:
            h["vllm:inter_token_latency_seconds"].observe(gap_s)


def request_families(by_model: dict[str, ModelRequests]) -> str:
    """The request-level vLLM families of every model that has finished a request."""
    if not by_model:
        return ""
    models = sorted(by_model.items())

    def per_model(value) -> list:
        return [((("model_name", m),), value(r)) for m, r in models]
    finished = [((("model_name", m), ("finished_reason", reason)), n)
                for m, r in models for reason, n in r.finished.items()]
    return "".join([
        family("vllm:prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
               per_model(lambda r: r.prompt_tokens)),
        family("vllm:generation_tokens_total", "counter",
               "Generated tokens of finished requests.", per_model(lambda r: r.generation_tokens)),
        family("vllm:request_success_total", "counter",
               "Finished requests, by the engine's finish reason.", finished),
    ] + [histogram_family([((("model_name", m),), r.histograms[name]) for m, r in models])
         for name, _, _ in REQUEST_HISTOGRAMS])


def kv_cache_usage(s: EngineStats) -> float:
    """Blocks held by running sequences / all blocks (0-1); evictable cached blocks count
    as free (an arriving request can have them at once)."""
    total_blocks = s.kv_blocks_used + s.kv_blocks_cached + s.kv_blocks_free
    return s.kv_blocks_used / total_blocks if total_blocks else 0.0


@dataclass(frozen=True)
class EngineReading:
    """One chat engine as /metrics reads it: its latest stats and its fixed KV size."""
    model: str
    stats: EngineStats
    kv_size: KvSize | None = None           # None: unknown (cache_config_info left out)


def engine_families(engines: Sequence[EngineReading]) -> str:
    """The picker's gauges and the prefix-cache counters of every chat engine."""
    if not engines:
        return ""

    def per_engine(value) -> list:
        return [(_model(e.model), value(e.stats)) for e in engines]
    sized = [e for e in engines if e.kv_size is not None]
    text = "".join([
        family("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled.",
               per_engine(lambda s: s.queue_depth)),
        family("vllm:num_requests_running", "gauge", "Requests in the engine's running batch.",
               per_engine(lambda s: s.active_sequences)),
        family("vllm:kv_cache_usage_perc", "gauge",
               "KV-cache blocks held by running requests / all blocks (1 = full).",
               per_engine(kv_cache_usage)),
        family("vllm:prefix_cache_queries_total", "counter",
               "Prompt tokens looked up in the prefix cache.",
               per_engine(lambda s: s.prompt_tokens)),
        family("vllm:prefix_cache_hits_total", "counter",
               "Prompt tokens found in the prefix cache (not computed again).",
               per_engine(lambda s: s.prefix_hit_tokens)),
        family("vllm:num_preemptions_total", "counter",
               "Requests preempted for KV blocks.", per_engine(lambda s: s.preemptions_total)),
    ])
    text += family("vllm:lora_requests_info", "gauge",
                   "LoRA adapters of the running and waiting requests, as labels (the value "
                   "is always 1).",
                   [(_model(e.model) + (("max_lora", str(e.stats.max_loras)),
                                        ("running_lora_adapters", ",".join(e.stats.running_adapters)),
                                        ("waiting_lora_adapters", ",".join(e.stats.waiting_adapters))), 1)
                    for e in engines])
    if sized:
        text += family("vllm:cache_config_info", "gauge",
                       "The KV cache's configuration, as labels (the value is always 1).",
                       [(_model(e.model) + (("block_size", str(e.kv_size.block_size_tokens)),
                                            ("num_gpu_blocks", str(e.kv_size.num_blocks))), 1)
                        for e in sized])
    return text


def _model(model: str) -> Labels:
    return (("model_name", model),)
