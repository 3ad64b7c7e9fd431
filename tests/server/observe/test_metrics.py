"""/metrics text: Prometheus exposition format 0.0.4, the contract's gauge names, valid histograms."""
from __future__ import annotations

from engine.api import EngineStats
from server.observe.metrics import Histogram, ServerMetrics, metrics_text
from server.observe.vllm_metrics import EngineReading, FinishedRequest
from tests.server.observe.prom_parse import parse

CHAPTER_NAMES = ("tl_engine_kv_blocks", "tl_engine_queue_depth", "tl_engine_active_sequences",
                 "tl_engine_batch_tokens", "tl_engine_prefix_cache_hit_ratio",
                 "tl_engine_preemptions_total", "tl_engine_kv_evictions_total")


def test_engine_gauges_and_server_counters():
    stats = EngineStats(kv_blocks_used=3, kv_blocks_cached=2, kv_blocks_free=11, queue_depth=4,
                        active_sequences=2, batch_tokens=17, prefix_hit_ratio=0.25,
                        preemptions_total=1, evictions_total=5, prefix_waits_total=6)
    server = ServerMetrics()
    server.count_request("chat", 200)
    server.count_request("chat", 200)
    server.count_request("chat", 429)
    server.observe_generation(FinishedRequest(model="m", prompt_tokens=10, completion_tokens=5,
                                              ttft_s=0.2, e2e_s=1.0, queue_s=0.05))
    types, samples = parse(metrics_text(stats, server))
    for name in CHAPTER_NAMES:
        assert name in types
    assert samples['tl_engine_kv_blocks{state="used"}'] == 3
    assert samples['tl_engine_kv_blocks{state="cached"}'] == 2
    assert samples['tl_engine_kv_blocks{state="free"}'] == 11
    assert samples["tl_engine_queue_depth"] == 4 and samples["tl_engine_batch_tokens"] == 17
    assert samples["tl_engine_prefix_cache_hit_ratio"] == 0.25
    assert types["tl_engine_preemptions_total"] == "counter"
    assert types["tl_engine_prefix_waits_total"] == "counter"
    assert samples["tl_engine_prefix_waits_total"] == 6
    assert samples['tl_http_requests_total{route="chat",status="200"}'] == 2
    assert samples['tl_http_requests_total{route="chat",status="429"}'] == 1
    assert samples["tl_prompt_tokens_total"] == 10 and samples["tl_generation_tokens_total"] == 5
    for hist in ("tl_request_time_to_first_token_seconds", "tl_request_e2e_latency_seconds",
                 "tl_request_time_per_output_token_seconds", "tl_request_queue_time_seconds"):
        assert types[hist] == "histogram"
        assert samples[hist + "_count"] == 1
    assert samples["tl_request_time_per_output_token_seconds_sum"] == 0.2   # (1.0 - 0.2) / 4


def test_histogram_buckets_are_cumulative_and_end_in_inf():
    h = Histogram("x_seconds", "help", (0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        h.observe(value)
    types, samples = parse(h.render())
    assert samples['x_seconds_bucket{le="0.1"}'] == 2        # le is inclusive
    assert samples['x_seconds_bucket{le="1.0"}'] == 3
    assert samples['x_seconds_bucket{le="+Inf"}'] == 4 == samples["x_seconds_count"]
    assert abs(samples["x_seconds_sum"] - 3.65) < 1e-9


def test_router_metrics_kv_utilization_prefix_counters_and_process():
    stats = EngineStats(kv_blocks_used=3, kv_blocks_cached=5, kv_blocks_free=8, queue_depth=2,
                        active_sequences=4, prefix_hit_tokens=30, prompt_tokens=120)
    types, samples = parse(metrics_text(stats, ServerMetrics()))
    # held by running sequences / all blocks; the 5 evictable cached blocks count as free
    assert samples["tl_engine_kv_cache_utilization"] == 3 / 16
    assert types["tl_engine_kv_cache_utilization"] == "gauge"
    assert samples["tl_engine_prefix_cache_hit_tokens_total"] == 30
    assert samples["tl_engine_prefix_cache_prompt_tokens_total"] == 120
    assert types["tl_engine_prefix_cache_hit_tokens_total"] == "counter"
    assert samples["tl_engine_queue_depth"] == 2 and samples["tl_engine_active_sequences"] == 4
    empty = parse(metrics_text(EngineStats()))[1]
    assert empty["tl_engine_kv_cache_utilization"] == 0.0
    assert types["process_cpu_seconds_total"] == "counter"
    assert samples["process_resident_memory_bytes"] > 1 << 20
    assert samples["process_open_fds"] >= 3
    import time
    assert time.time() - 86400 * 365 < samples["process_start_time_seconds"] <= time.time()


def test_loop_stall_gauge_only_when_the_loop_measures_it():
    types, samples = parse(metrics_text(EngineStats(), ServerMetrics(),
                                        loop_stall_s=(0.031, 0.002)))
    assert types["tl_loop_stall_seconds_max"] == types["tl_loop_stall_cpu_seconds_max"] == "gauge"
    assert samples["tl_loop_stall_seconds_max"] == 0.031
    assert samples["tl_loop_stall_cpu_seconds_max"] == 0.002
    types, _ = parse(metrics_text(EngineStats(), ServerMetrics()))
    assert "tl_loop_stall_seconds_max" not in types


def test_several_engines_share_each_family_every_sample_labelled_with_its_model():
    """Two chat engines: one HELP/TYPE per family (parse asserts it), each engine's samples
    under its `model`; the request counter labelled with the model a request named."""
    server = ServerMetrics()
    server.count_request("chat", 200, model="a")
    server.count_request("chat", 429, model="b")
    server.count_request("models", 200)                        # no model: no label
    engines = [EngineReading("a", EngineStats(queue_depth=1, kv_blocks_used=2)),
               EngineReading("b", EngineStats(queue_depth=5, kv_blocks_free=7))]
    types, samples = parse(metrics_text(None, server, engines=engines))
    assert types["tl_engine_queue_depth"] == "gauge"
    assert samples['tl_engine_queue_depth{model="a"}'] == 1
    assert samples['tl_engine_queue_depth{model="b"}'] == 5
    assert samples['tl_engine_kv_blocks{model="a",state="used"}'] == 2
    assert samples['tl_engine_kv_blocks{model="b",state="free"}'] == 7
    assert samples['tl_http_requests_total{model="a",route="chat",status="200"}'] == 1
    assert samples['tl_http_requests_total{model="b",route="chat",status="429"}'] == 1
    assert samples['tl_http_requests_total{route="models",status="200"}'] == 1


def test_speculative_drafts_per_source_carry_model_and_source_labels():
    stats = EngineStats(spec_draft_tokens=70, spec_accepted_tokens=41,
                        spec_by_source=(("prediction", 40, 31), ("prompt_lookup", 30, 10)))
    types, samples = parse(metrics_text(stats, model="smol-135m"))
    assert types["tl_engine_spec_draft_tokens_total"] == "counter"
    assert types["tl_engine_spec_accepted_tokens_total"] == "counter"
    drafted = 'tl_engine_spec_draft_tokens_total{model="smol-135m",source="%s"}'
    accepted = 'tl_engine_spec_accepted_tokens_total{model="smol-135m",source="%s"}'
    assert samples[drafted % "prediction"] == 40 and samples[accepted % "prediction"] == 31
    assert samples[drafted % "prompt_lookup"] == 30 and samples[accepted % "prompt_lookup"] == 10
    _, quiet = parse(metrics_text(EngineStats()))            # no source reported: no samples
    assert not [name for name in quiet if name.startswith("tl_engine_spec_")]
