"""/metrics: counters, gauges and histograms in the Prometheus text format 0.0.4.

The format's writers are server/observe/prom_text.py. Four sources feed this page:
* the engine's `EngineStats` snapshot (published by the engine thread after each step):
  the contract's gauges `tl_engine_*`, the KV-cache utilisation (0-1, what routers such as
  the Gateway API Inference Extension's endpoint picker read), the prefix-cache counters
  and the speculative drafts per source (`source` label);
* `server/observe/process_metrics.py`: the standard `process_*` families;
* `ServerMetrics`, updated on the loop thread only (no lock): requests by route and
  status, prompt/generation tokens, and the latency histograms;
* the Batch API's `BatchReading`, when it is on (batches by status, its requests, the
  running batch's lines left);
* the loop's worst stall (`tl_loop_stall_seconds_max` and `_cpu_seconds_max`, read from
  `EventLoop.stall`).
The engine and request numbers are written twice: under our `tl_*` names and under vLLM's
`vllm:*` names with a `model_name` label (server/observe/vllm_metrics.py), from the same
values, so a router or dashboard made for vLLM reads tl-serve unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from engine.api import EngineStats
from server.observe.process_metrics import process_metrics_text
from server.observe.prom_text import CONTENT_TYPE, Histogram, family
from server.observe.vllm_metrics import (EngineReading, FinishedRequest, ModelRequests,
                                         engine_families, kv_cache_usage, request_families)
from server.worker.encoder_thread import EncoderStats

__all__ = ["CONTENT_TYPE", "Histogram", "ServerMetrics", "metrics_text"]

# Latency buckets in seconds: a CPU engine spans milliseconds (inter-token) to minutes (e2e).
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                     60.0, 120.0)
PER_TOKEN_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                       0.5, 1.0, 2.5)


def engine_metrics_text(engines: Sequence[tuple[str | None, EngineStats]]) -> str:
    """The engine gauges `tl_engine_*` (docs/CONTRACT.md) of every engine as one page:
    each family once (Prometheus refuses a family that appears twice), its samples those of
    every engine in order, labelled `model="<id>"` first when the engine's id is given."""
    per_engine = [_engine_families(s, _model_label(model)) for model, s in engines]
    return "".join(family(name, kind, help_text,
                          [sample for families in per_engine for sample in families[index][3]])
                   for index, (name, kind, help_text, _) in enumerate(per_engine[0]))


def _model_label(model: str | None) -> tuple[tuple[str, str], ...]:
    return (("model", model),) if model is not None else ()


def _engine_families(s: EngineStats, m: tuple[tuple[str, str], ...] = ()) -> list[tuple]:
    """(name, kind, help, samples) of each engine family for one snapshot; `m` leads every
    sample's labels."""
    drafted = [(m + (("source", source),), d) for source, d, _ in s.spec_by_source]
    accepted = [(m + (("source", source),), a) for source, _, a in s.spec_by_source]
    return [
        ("tl_engine_kv_blocks", "gauge", "KV cache blocks by state.",
         [(m + (("state", "used"),), s.kv_blocks_used),
          (m + (("state", "cached"),), s.kv_blocks_cached),
          (m + (("state", "free"),), s.kv_blocks_free)]),
        ("tl_engine_kv_cache_utilization", "gauge",
         "KV-cache blocks held by running sequences / all blocks (0-1); cached, "
         "evictable blocks count as free.", [(m, kv_cache_usage(s))]),
        ("tl_engine_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens reused from the prefix cache.", [(m, s.prefix_hit_tokens)]),
        ("tl_engine_prefix_cache_prompt_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache (the hit counter's denominator).",
         [(m, s.prompt_tokens)]),
        ("tl_engine_queue_depth", "gauge", "Requests waiting to be scheduled.",
         [(m, s.queue_depth)]),
        ("tl_engine_active_sequences", "gauge", "Sequences running in the engine.",
         [(m, s.active_sequences)]),
        ("tl_engine_batch_tokens", "gauge", "Tokens in the last engine step.",
         [(m, s.batch_tokens)]),
        ("tl_engine_prefix_cache_hit_ratio", "gauge",
         "Prompt tokens reused from the prefix cache / prompt tokens, since start.",
         [(m, float(s.prefix_hit_ratio))]),
        ("tl_engine_preemptions_total", "counter", "Sequences preempted for KV blocks.",
         [(m, s.preemptions_total)]),
        ("tl_engine_prefix_waits_total", "counter",
         "Requests that waited for a shared prompt prefix another request was computing.",
         [(m, s.prefix_waits_total)]),
        ("tl_engine_kv_evictions_total", "counter", "Cached KV blocks evicted.",
         [(m, s.evictions_total)]),
        ("tl_engine_steps_total", "counter", "Engine steps run.", [(m, s.steps_total)]),
        ("tl_engine_lora_adapters", "gauge",
         "Distinct LoRA adapters of the running and of the waiting requests.",
         [(m + (("state", "running"),), len(s.running_adapters)),
          (m + (("state", "waiting"),), len(s.waiting_adapters))]),
        ("tl_engine_lora_steps_total", "counter",
         "Engine steps with LoRA rows, by path: merged (every row on one adapter, run on its "
         "merged weights) or grouped (the base's weights and each adapter's products).",
         [(m + (("path", "merged"),), s.lora_merged_steps_total),
          (m + (("path", "grouped"),), s.lora_grouped_steps_total)]),
        ("tl_engine_lora_merged_bytes", "gauge",
         "Bytes of the one adapter's merged weights the engine holds (0: none).",
         [(m, s.lora_merged_bytes)]),
        ("tl_engine_lora_merges_total", "counter",
         "Adapters merged into a copy of the base's weights (each switch of adapter builds one).",
         [(m, s.lora_merges_built_total)]),
        # Speculative decoding per draft source (grammar, prediction, suffix, prompt_lookup):
        # a source the engine has not reported has no sample.
        ("tl_engine_spec_draft_tokens_total", "counter",
         "Speculative draft tokens verified, by draft source.", drafted),
        ("tl_engine_spec_accepted_tokens_total", "counter",
         "Speculative draft tokens the model accepted, by draft source.", accepted),
    ]


class ServerMetrics:
    """Request-level metrics, updated on the loop thread."""

    def __init__(self):
        self.requests: dict[tuple[str, int, str], int] = {}   # (route, status, model) -> n
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft = Histogram("tl_request_time_to_first_token_seconds",
                              "Time from request arrival to its first output token.",
                              LATENCY_BUCKETS_S)
        self.tpot = Histogram("tl_request_time_per_output_token_seconds",
                              "Mean time between output tokens of one request.",
                              PER_TOKEN_BUCKETS_S)
        self.e2e = Histogram("tl_request_e2e_latency_seconds",
                             "Time from request arrival to its last output token.",
                             LATENCY_BUCKETS_S)
        self.queue = Histogram("tl_request_queue_time_seconds",
                               "Time from arrival until the request's first engine step.",
                               LATENCY_BUCKETS_S)
        self.by_model: dict[str, ModelRequests] = {}   # served model id -> its vllm: series

    def count_request(self, route: str, status: int, model: str = "") -> None:
        """One answered request; `model`: the served model it named ("" when none: the
        sample then has no `model` label)."""
        key = (route, status, model)
        self.requests[key] = self.requests.get(key, 0) + 1

    def observe_generation(self, done: FinishedRequest) -> None:
        """One finished generation: our histograms and counters, and its model's series
        under vLLM's names (the same numbers)."""
        self.prompt_tokens += done.prompt_tokens
        self.generation_tokens += done.completion_tokens
        if done.ttft_s is not None:
            self.ttft.observe(done.ttft_s)
            if done.completion_tokens > 1:
                self.tpot.observe((done.e2e_s - done.ttft_s) / (done.completion_tokens - 1))
        self.e2e.observe(done.e2e_s)
        if done.queue_s is not None:
            self.queue.observe(done.queue_s)
        self.by_model.setdefault(done.model, ModelRequests()).observe(done)

    def render(self) -> str:
        by_route = [(((("model", model),) if model else ()) + (("route", route),
                                                                ("status", str(status))), n)
                    for (route, status, model), n in sorted(self.requests.items())]
        return "".join([
            family("tl_http_requests_total", "counter",
                   "HTTP requests by route and status (and the served model they named).",
                   by_route),
            family("tl_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
                   [((), self.prompt_tokens)]),
            family("tl_generation_tokens_total", "counter",
                   "Generated tokens of finished requests.", [((), self.generation_tokens)]),
            self.ttft.render(), self.tpot.render(), self.e2e.render(), self.queue.render(),
            request_families(self.by_model),
        ])


def loop_metrics_text(stall_max_s: float, stall_cpu_max_s: float) -> str:
    """The loop thread's worst stall (server/http/loop.py measures it): what a stream's
    inter-token gap or a /healthz answer waited at worst behind other callbacks, and the
    loop thread's own CPU time in that worst iteration."""
    return (family("tl_loop_stall_seconds_max", "gauge",
                   "Longest time one loop iteration spent in its callbacks since start.",
                   [((), stall_max_s)])
            + family("tl_loop_stall_cpu_seconds_max", "gauge",
                     "Most CPU time the loop thread spent in one iteration since start.",
                     [((), stall_cpu_max_s)]))


def encoder_metrics_text(encoders: Sequence[tuple[str, EncoderStats]]) -> str:
    """Each sentence-embedding model's counters, labelled with its id."""
    if not encoders:
        return ""

    def per_model(value: Callable[[EncoderStats], float]) -> list:
        return [((("model", model),), value(s)) for model, s in encoders]
    return "".join([
        family("tl_encoder_requests_total", "counter", "Embeddings calls an encoder finished.",
               per_model(lambda s: s.requests_total)),
        family("tl_encoder_inputs_total", "counter", "Inputs an encoder embedded.",
               per_model(lambda s: s.inputs_total)),
        family("tl_encoder_tokens_total", "counter", "Tokens an encoder ran (unpadded).",
               per_model(lambda s: s.tokens_total)),
        family("tl_encoder_batches_total", "counter", "Encoder forwards (padded batches) run.",
               per_model(lambda s: s.batches_total)),
        family("tl_encoder_busy_seconds_total", "counter",
               "Time an encoder spent computing, inside the compute turn.",
               per_model(lambda s: s.busy_s_total)),
        family("tl_encoder_queue_depth", "gauge", "Embeddings calls waiting for an encoder.",
               per_model(lambda s: s.queue_depth)),
    ])


@dataclass(frozen=True)
class BatchReading:
    """The Batch API's numbers: batches by status, its requests answered since start (and
    of those, the ones not 2xx), the running batch's lines not yet answered."""
    by_status: Mapping[str, int]
    requests_done: int
    requests_failed: int
    queued_lines: int


def batch_metrics_text(reading: BatchReading) -> str:
    return (family("tl_batches", "gauge", "Batches by status.",
                   [((("status", status),), n) for status, n in reading.by_status.items()])
            + family("tl_batch_requests_total", "counter",
                     "Batch requests answered since start (failed: not 2xx, counted in done too).",
                     [((("outcome", "done"),), reading.requests_done),
                      ((("outcome", "failed"),), reading.requests_failed)])
            + family("tl_batch_queue_depth", "gauge",
                     "Lines not yet answered of every batch waiting or running.",
                     [((), reading.queued_lines)]))


def metrics_text(stats: EngineStats | None, server: ServerMetrics | None = None,
                 loop_stall_s: tuple[float, float] | None = None,
                 encoders: Sequence[tuple[str, EncoderStats]] = (),
                 model: str | None = None,
                 engines: Sequence[EngineReading] = ()) -> str:
    """`stats`: one chat engine's, labelled `model` when given (None: see `engines`);
    `engines`: each chat engine's reading, every sample labelled with its id;
    `loop_stall_s`: (wall, CPU) of the loop's worst iteration, when it is measured;
    `encoders`: (model id, stats) of each sentence-embedding model."""
    loop = loop_metrics_text(*loop_stall_s) if loop_stall_s is not None else ""
    readings = ([EngineReading(model or "", stats)] if stats is not None else []) + list(engines)
    every = ([(model, stats)] if stats is not None else []) + [(e.model, e.stats)
                                                              for e in engines]
    engine = engine_metrics_text(every) if every else ""
    return (engine + engine_families(readings) + encoder_metrics_text(encoders)
            + (server.render() if server is not None else "") + loop + process_metrics_text())
