"""The model-server protocol end to end, on a real server and engine (the succ model): its
health port's /metrics read as the Gateway API Inference Extension's endpoint picker reads
it (the `vllm:` names, the types of their `# TYPE` lines, a `model_name` on every sample,
values in range and equal to what the requests did), and `vllm:kv_cache_usage_perc` rising
while a stream holds KV blocks and falling back once it has ended. The engine steps only
when the test permits (tests/fakes.py's PacedSteps), so "the stream is still running" holds
while the test reads the gauge."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import requests

from server.config import ServeConfig
from tests.e2e.helpers import TIMEOUT_S, running_server
from tests.fakes import PacedSteps
from tests.polling import wait_for
from tests.server.observe.prom_parse import parse

NUM_KV_BLOCKS = 64                  # a small pool: one stream's blocks are a visible fraction
ANSWER_TOKENS = 8
# 42 prompt tokens (the byte tokenizer) + 8: three whole blocks stay cached after the answer,
# so "falls back" means held blocks are told from cached ones (those are free to reuse)
PROMPT = "abc" * 14
# what the picker and vLLM's dashboards read, with vLLM's types
PROTOCOL = {"vllm:num_requests_waiting": "gauge", "vllm:num_requests_running": "gauge",
            "vllm:kv_cache_usage_perc": "gauge", "vllm:cache_config_info": "gauge",
            "vllm:prefix_cache_queries_total": "counter",
            "vllm:prefix_cache_hits_total": "counter", "vllm:prompt_tokens_total": "counter",
            "vllm:generation_tokens_total": "counter", "vllm:request_success_total": "counter",
            "vllm:time_to_first_token_seconds": "histogram",
            "vllm:inter_token_latency_seconds": "histogram",
            "vllm:e2e_request_latency_seconds": "histogram",
            "vllm:request_queue_time_seconds": "histogram",
            "vllm:request_prefill_time_seconds": "histogram",
            "vllm:request_decode_time_seconds": "histogram"}
LABELS = re.compile(r'([a-zA-Z_]+)="([^"]*)"')


def config() -> dict:
    """One token a step (no speculation), the prompt in one step (no step-time target to
    chunk it by: a loaded machine's slow steps would) and a small KV pool."""
    engine = replace(ServeConfig().engine, speculative=None, num_kv_blocks=NUM_KV_BLOCKS,
                     itl_target_ms=0)
    return {"engine": engine}


def scrape(server) -> tuple[dict[str, str], dict[str, float]]:
    r = requests.get(server.health_url + "/metrics", timeout=TIMEOUT_S)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    return parse(r.text)


def labels(sample: str) -> dict[str, str]:
    return dict(LABELS.findall(sample.partition("{")[2]))


def completion(max_tokens: int) -> dict:
    """Greedy: the succ model answers each byte's successor, "d", "e", ... after the prompt's
    last "c", one ASCII character a token (sampled, a byte past 0x7f is no text yet)."""
    return {"model": "succ", "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}


def test_metrics_read_as_the_endpoint_picker_reads_them(succ_model_dir):
    with running_server(succ_model_dir, **config()) as server:
        r = requests.post(server.http_url + "/v1/completions", json=completion(ANSWER_TOKENS),
                          timeout=TIMEOUT_S)
        events = [json.loads(line[6:]) for line in r.text.splitlines()
                  if line.startswith("data: {")]
        usage = events[-1]["usage"]
        assert usage["completion_tokens"] == ANSWER_TOKENS
        # the picker scrapes the health port; the API port has no /metrics
        assert requests.get(server.http_url + "/metrics", timeout=TIMEOUT_S).status_code == 404
        types, samples = scrape(server)
    for name, kind in PROTOCOL.items():
        assert types.get(name) == kind, name
    vllm = {k: v for k, v in samples.items() if k.startswith("vllm:")}
    assert all(labels(k).get("model_name") == "succ" for k in vllm), vllm
    one = {k.partition("{")[0]: v for k, v in vllm.items() if set(labels(k)) == {"model_name"}}
    assert 0.0 <= one["vllm:kv_cache_usage_perc"] <= 1.0
    for gauge in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
        assert one[gauge] >= 0 and one[gauge] == int(one[gauge]), gauge
    info = [k for k in vllm if k.startswith("vllm:cache_config_info")]
    assert len(info) == 1 and vllm[info[0]] == 1
    block_size, num_blocks = (int(labels(info[0])[k]) for k in ("block_size", "num_gpu_blocks"))
    assert block_size == ServeConfig().engine.block_size and num_blocks == NUM_KV_BLOCKS
    assert num_blocks == sum(v for k, v in samples.items() if k.startswith("tl_engine_kv_blocks"))
    # the counters say what the one request did (its usage), and equal ours
    assert one["vllm:prompt_tokens_total"] == usage["prompt_tokens"] == \
        samples["tl_prompt_tokens_total"]
    assert one["vllm:generation_tokens_total"] == ANSWER_TOKENS
    assert vllm['vllm:request_success_total{model_name="succ",finished_reason="length"}'] == 1
    assert vllm['vllm:request_success_total{model_name="succ",finished_reason="stop"}'] == 0
    assert one["vllm:prefix_cache_queries_total"] == usage["prompt_tokens"]
    assert 0 <= one["vllm:prefix_cache_hits_total"] <= one["vllm:prefix_cache_queries_total"]
    # histograms: cumulative buckets ending in +Inf = count; one request, a gap per later token
    counts = {"vllm:time_to_first_token_seconds": 1, "vllm:e2e_request_latency_seconds": 1,
              "vllm:request_prefill_time_seconds": 1, "vllm:request_decode_time_seconds": 1,
              "vllm:request_queue_time_seconds": 1,
              "vllm:inter_token_latency_seconds": ANSWER_TOKENS - 1}
    for name, count in counts.items():
        buckets = [v for k, v in vllm.items() if k.startswith(name + "_bucket")]
        assert buckets == sorted(buckets) and buckets[-1] == count == one[name + "_count"], name
        assert vllm[f'{name}_bucket{{model_name="succ",le="+Inf"}}'] == count
    # The one request's phases, in seconds: each generated token takes a step, so the first
    # token, the decode and the whole request took time; the phases add up by their
    # definitions (queue + prefill = TTFT, TTFT + decode = e2e, the token gaps = decode).
    s = {name.removeprefix("vllm:").removesuffix("_seconds"): one[name + "_sum"]
         for name in counts}
    assert s["time_to_first_token"] > 0 and s["request_decode_time"] > 0
    assert s["request_prefill_time"] > 0 and s["request_queue_time"] >= 0     # (max(0, ...))
    assert abs(s["request_queue_time"] + s["request_prefill_time"]
               - s["time_to_first_token"]) < 1e-9
    assert abs(s["time_to_first_token"] + s["request_decode_time"]
               - s["e2e_request_latency"]) < 1e-9
    assert abs(s["inter_token_latency"] - s["request_decode_time"]) < 1e-9
    assert abs(one["vllm:e2e_request_latency_seconds_sum"]
               - samples["tl_request_e2e_latency_seconds_sum"]) < 1e-9


def kv_usage(server) -> tuple[float, float, float]:
    """(vllm:kv_cache_usage_perc, our utilisation gauge, vllm:num_requests_running)."""
    _, samples = scrape(server)
    return (samples['vllm:kv_cache_usage_perc{model_name="succ"}'],
            samples['tl_engine_kv_cache_utilization{model="succ"}'],
            samples['vllm:num_requests_running{model_name="succ"}'])


def test_kv_cache_usage_rises_while_a_stream_runs_and_falls_back_after(succ_model_dir):
    paced: list[PacedSteps] = []

    def wrap(engine):
        paced.append(PacedSteps(engine))
        return paced[0]
    with running_server(succ_model_dir, wrap_engine=wrap, **config()) as server:
        assert kv_usage(server) == (0.0, 0.0, 0.0)              # idle: nothing held
        engine = paced[0]
        engine.permit(2)                                        # prefill + token 1, token 2
        r = requests.post(server.http_url + "/v1/completions", json=completion(ANSWER_TOKENS),
                          stream=True, timeout=TIMEOUT_S)       # returns with the first token
        lines = r.iter_lines()
        texts = []
        while len("".join(texts)) < 2:                          # the second token has come
                                                                # (one character a token; two
                                                                # may share a chunk under load):
            line = next(lines)                                  # the turn before it is
            if line.startswith(b'data: {"id"'):                 # published, the engine waits
                texts += [c["text"] for c in json.loads(line[6:])["choices"] if c["text"]]
        usage, ours, running = kv_usage(server)
        assert 0.0 < usage <= 1.0 and usage == ours and running == 1
        assert usage * NUM_KV_BLOCKS == int(usage * NUM_KV_BLOCKS)   # whole blocks held
        engine.permit(ANSWER_TOKENS)                            # the rest of the answer
        rest = b"\n".join(lines)
        assert rest.rstrip().endswith(b"data: [DONE]")
        # the finishing turn publishes its stats just after the last token goes out
        assert wait_for(lambda: kv_usage(server) == (0.0, 0.0, 0.0), timeout_s=TIMEOUT_S)
        _, samples = scrape(server)
        assert samples['tl_engine_kv_blocks{model="succ",state="cached"}'] >= 3
