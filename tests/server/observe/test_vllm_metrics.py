"""The model-server protocol under vLLM's names: the same values as ours, vLLM's types and
buckets, a `model_name` on every sample; and the new request phases as the bridge measures
them on a manual clock (a chunked prefill's start, the real gap between a stream's steps)."""
from __future__ import annotations

from engine.api import (FINISH_LENGTH, EngineStats, GenRequest, KvSize, StepRecord, StepRow,
                        TokenOut)
from server.observe.metrics import ServerMetrics, metrics_text
from server.observe.vllm_metrics import (INTER_TOKEN_BUCKETS_S, REQUEST_BUCKETS_S,
                                         TTFT_BUCKETS_S, EngineReading, FinishedRequest)
from server.worker.tickets import Ticket
from tests.fakes import Clock, bridge_for
from tests.server.observe.prom_parse import parse

# vLLM's v1 Prometheus logger, as published (vllm/v1/metrics/loggers.py): first and last
# bounds and how many, written down here rather than read from the code under test
VLLM_BOUNDS = {"vllm:time_to_first_token_seconds": (0.001, 2560.0, 22),
               "vllm:inter_token_latency_seconds": (0.01, 80.0, 19),
               "vllm:e2e_request_latency_seconds": (0.3, 7680.0, 21),
               "vllm:request_queue_time_seconds": (0.3, 7680.0, 21),
               "vllm:request_prefill_time_seconds": (0.3, 7680.0, 21),
               "vllm:request_decode_time_seconds": (0.3, 7680.0, 21)}


def test_the_picker_gauges_and_prefix_counters_carry_our_values_under_vllm_names():
    a = EngineStats(kv_blocks_used=3, kv_blocks_cached=5, kv_blocks_free=8, queue_depth=2,
                    active_sequences=4, prefix_hit_tokens=30, prompt_tokens=120,
                    preemptions_total=7)
    b = EngineStats(kv_blocks_free=10, queue_depth=1)
    engines = [EngineReading("smol", a, KvSize(num_blocks=16, block_size_tokens=16, nbytes=1)),
               EngineReading("tiny", b)]                   # its size unknown: no info sample
    family, samples = parse(metrics_text(None, engines=engines))
    assert family["vllm:num_requests_waiting"] == family["vllm:num_requests_running"] == "gauge"
    assert family["vllm:kv_cache_usage_perc"] == "gauge"
    assert family["vllm:prefix_cache_queries_total"] == "counter"
    assert family["vllm:prefix_cache_hits_total"] == "counter"
    assert samples['vllm:num_requests_waiting{model_name="smol"}'] == 2
    assert samples['vllm:num_requests_running{model_name="smol"}'] == 4
    assert samples['vllm:kv_cache_usage_perc{model_name="smol"}'] == 3 / 16   # held / all
    assert samples['vllm:kv_cache_usage_perc{model_name="tiny"}'] == 0.0
    for model in ("smol", "tiny"):                      # the same number as ours, per engine
        assert samples[f'vllm:kv_cache_usage_perc{{model_name="{model}"}}'] == \
            samples[f'tl_engine_kv_cache_utilization{{model="{model}"}}']
        assert samples[f'vllm:num_requests_waiting{{model_name="{model}"}}'] == \
            samples[f'tl_engine_queue_depth{{model="{model}"}}']
    assert samples['vllm:prefix_cache_queries_total{model_name="smol"}'] == 120
    assert samples['vllm:prefix_cache_hits_total{model_name="smol"}'] == 30
    assert samples['vllm:num_preemptions_total{model_name="smol"}'] == 7
    assert family["vllm:cache_config_info"] == "gauge"
    info = [k for k in samples if k.startswith("vllm:cache_config_info")]
    assert info == ['vllm:cache_config_info{model_name="smol",block_size="16",'
                    'num_gpu_blocks="16"}']
    assert samples[info[0]] == 1


def test_request_series_use_vllm_buckets_counters_and_finish_reasons():
    server = ServerMetrics()
    server.observe_generation(FinishedRequest(
        model="smol", prompt_tokens=10, completion_tokens=4, finish_reason="length",
        ttft_s=0.5, e2e_s=2.0, queue_s=0.25, prefill_s=0.25, decode_s=1.5,
        token_gaps_s=(0.125, 0.375, 1.0)))
    server.observe_generation(FinishedRequest(
        model="smol", prompt_tokens=6, completion_tokens=2, finish_reason="tool_calls",
        ttft_s=0.1, e2e_s=0.2, queue_s=0.0, prefill_s=0.1, decode_s=0.1, token_gaps_s=(0.1,)))
    family, samples = parse(server.render())
    assert samples['vllm:prompt_tokens_total{model_name="smol"}'] == 16 == \
        samples["tl_prompt_tokens_total"]
    assert samples['vllm:generation_tokens_total{model_name="smol"}'] == 6
    assert family["vllm:request_success_total"] == "counter"
    assert samples['vllm:request_success_total{model_name="smol",finished_reason="length"}'] == 1
    assert samples['vllm:request_success_total{model_name="smol",finished_reason="stop"}'] == 1
    for name, (first, last, count) in VLLM_BOUNDS.items():
        assert family[name] == "histogram"
        bounds = [float(k.split('le="')[1].rstrip('"}')) for k in samples
                  if k.startswith(name + "_bucket") and "+Inf" not in k]
        assert (bounds[0], bounds[-1], len(bounds)) == (first, last, count), name
    assert (TTFT_BUCKETS_S[0], INTER_TOKEN_BUCKETS_S[0], REQUEST_BUCKETS_S[0]) == (
        0.001, 0.01, 0.3)
    itl = 'vllm:inter_token_latency_seconds_%s{model_name="smol"%s}'
    assert samples[itl % ("count", "")] == 4                 # one per gap, not per request
    assert samples[itl % ("sum", "")] == 1.6
    assert samples[itl % ("bucket", ',le="0.1"')] == 1
    assert samples[itl % ("bucket", ',le="0.15"')] == 2
    assert samples[itl % ("bucket", ',le="0.4"')] == 3
    prefill = 'vllm:request_prefill_time_seconds_sum{model_name="smol"}'
    assert abs(samples[prefill] - 0.35) < 1e-12
    assert samples['vllm:request_decode_time_seconds_sum{model_name="smol"}'] == 1.6
    assert samples['vllm:request_inference_time_seconds_sum{model_name="smol"}'] == 1.95
    assert samples['vllm:e2e_request_latency_seconds_sum{model_name="smol"}'] == \
        samples["tl_request_e2e_latency_seconds_sum"] == 2.2


class ChunkedPrefill:
    """Each prompt takes PREFILL_STEPS steps of prefill (rows in the step record, no output),
    then one token a step; step k takes STEP_S[k] of the manual clock."""
    PREFILL_STEPS = 2

    def __init__(self, clock: Clock, step_s: list[float]):
        self.clock, self.step_s = clock, list(step_s)
        self.steps_done: dict[int, int] = {}             # engine id -> steps it was in
        self.max_tokens: dict[int, int] = {}
        self.record_steps, self.last_step, self.steps = False, None, 0

    def add_request(self, request: GenRequest) -> int:
        rid = len(self.max_tokens)
        self.steps_done[rid], self.max_tokens[rid] = 0, request.max_tokens
        return rid

    def has_work(self) -> bool:
        return bool(self.steps_done)

    def step(self) -> list[TokenOut]:
        start_s = self.clock()
        self.clock.advance(self.step_s.pop(0))
        outs, rows = [], []
        for rid in list(self.steps_done):
            self.steps_done[rid] += 1
            made = self.steps_done[rid] - self.PREFILL_STEPS
            rows.append(StepRow(seq_id=rid, num_tokens=1, is_prefill=made <= 0))
            if made > 0:
                done = made >= self.max_tokens[rid]
                outs.append(TokenOut(id=rid, token=made, finish=FINISH_LENGTH if done else None))
                if done:
                    del self.steps_done[rid]
        self.steps += 1
        if self.record_steps:
            self.last_step = StepRecord(step=self.steps, start_s=start_s, scheduled_s=start_s,
                                        forward_s=self.clock(), end_s=self.clock(),
                                        rows=tuple(rows), preempted=())
        return outs

    def stats(self) -> EngineStats:
        return EngineStats(active_sequences=len(self.steps_done))

    def take_embeddings(self) -> list:
        return []


class Watcher:
    """An engine view that looks at nothing: its presence turns the step records on."""

    def update(self, engine, stats, stepped) -> None:
        pass


def run_one_request(view) -> Ticket:
    # prefill 0.5 + 0.5, then tokens after 0.25, 0.125, 0.375, 0.25 (exact in binary)
    clock = Clock(10.0)
    engine = ChunkedPrefill(clock, [0.5, 0.5, 0.25, 0.125, 0.375, 0.25])
    bridge = bridge_for(engine, clock=clock, view=view)
    ticket = bridge.submit(GenRequest(prompt=(1, 2, 3), max_tokens=4))
    while bridge.run_once():
        pass
    assert ticket.is_finished and [e.token for e in ticket.events] == [1, 2, 3, 4]
    return ticket


def test_the_bridge_measures_each_gap_between_a_streams_steps_and_the_prefill_start():
    ticket = run_one_request(Watcher())
    assert ticket.started_s == 10.0                   # the first prefill chunk's step
    assert ticket.first_token_s == 11.25 and ticket.last_token_s == 12.0
    # the real gaps, not their mean (0.25 each): a slow step shows as a slow gap
    assert ticket.token_gaps_s == [0.125, 0.375, 0.25]


def test_without_a_step_record_the_start_is_the_step_of_the_first_output():
    ticket = run_one_request(None)
    assert ticket.started_s == 11.0 == ticket.scheduled_s
    assert ticket.token_gaps_s == [0.125, 0.375, 0.25]


def test_lora_requests_info_names_each_engine_s_running_and_waiting_adapters():
    busy = EngineStats(max_loras=4, running_adapters=("poet", "sql"), waiting_adapters=("sql",))
    engines = [EngineReading("smol", busy), EngineReading("tiny", EngineStats(max_loras=2))]
    family, samples = parse(metrics_text(None, engines=engines))
    assert family["vllm:lora_requests_info"] == "gauge"
    info = sorted(k for k in samples if k.startswith("vllm:lora_requests_info"))
    assert info == ['vllm:lora_requests_info{model_name="smol",max_lora="4",running_lora_adapters='
                    '"poet,sql",waiting_lora_adapters="sql"}',
                    'vllm:lora_requests_info{model_name="tiny",max_lora="2",running_lora_adapters='
                    '"",waiting_lora_adapters=""}']
    assert samples['tl_engine_lora_adapters{model="smol",state="running"}'] == 2
    assert samples['tl_engine_lora_adapters{model="smol",state="waiting"}'] == 1


def test_the_merged_weights_series_carry_the_engine_s_lora_merge_numbers():
    stats = EngineStats(lora_merged_adapter="poet", lora_merged_bytes=2048,
                        lora_merged_steps_total=7, lora_grouped_steps_total=3,
                        lora_merges_built_total=2)
    family, samples = parse(metrics_text(None, engines=[EngineReading("smol", stats)]))
    assert family["tl_engine_lora_steps_total"] == "counter"
    assert family["tl_engine_lora_merged_bytes"] == "gauge"
    assert samples['tl_engine_lora_steps_total{model="smol",path="merged"}'] == 7
    assert samples['tl_engine_lora_steps_total{model="smol",path="grouped"}'] == 3
    assert samples['tl_engine_lora_merged_bytes{model="smol"}'] == 2048
    assert samples['tl_engine_lora_merges_total{model="smol"}'] == 2
