"""bench/load_sweep.py's reading of the rows our server computed in a window (the bound's
input): prompt rows from the prefix-cache counters, sampled rows and attended positions
from the streams. The benchmark itself is never run here."""
from __future__ import annotations

from bench.load_client import LoadResult, StreamRecord
from bench.load_server import HIT_COUNTER, PROMPT_COUNTER, STEPS_COUNTER
from bench.load_sweep import served_mix


def counters(steps: float, prompt: float, hits: float) -> dict[str, float]:
    return {STEPS_COUNTER: steps, PROMPT_COUNTER: prompt, HIT_COUNTER: hits}


def test_served_mix_counts_the_window_rows():
    # started before the window: its first token is outside, two decode tokens inside
    early = StreamRecord(sent_s=8.0, event_s=[9.0, 10.5, 11.0], usage_tokens=3, prompt_tokens=40,
                         status=200, done=True, ended_s=11.0)
    # sent in the window and cut by its end: prompt length unknown, the mean of the others
    cut = StreamRecord(sent_s=12.0, event_s=[13.0, 14.0], status=200)
    outside = StreamRecord(sent_s=1.0, event_s=[2.0], usage_tokens=1, prompt_tokens=60,
                           status=200, done=True, ended_s=2.0)
    result = LoadResult([early, cut, outside], start_s=10.0, end_s=20.0, client_cpu_s=0.1, wall_s=21.0)
    mix = served_mix(result, counters(100, 1_000, 400), counters(104, 1_090, 420))
    assert mix.steps == 4
    assert mix.sampled_rows == 4                            # 10.5, 11.0, 13.0, 14.0
    assert mix.rows == (90 - 20) + 4 - 1                    # prompt rows + decode rows
    assert mix.context_positions == (40 + 1) + (40 + 2) + (50 + 1)   # mean prompt 50 for `cut`


def test_several_tokens_per_event_count_as_the_usage_says():
    burst = StreamRecord(sent_s=10.0, event_s=[11.0, 12.0], usage_tokens=4, prompt_tokens=10,
                         status=200, done=True, ended_s=12.0)           # 2 tokens per event
    result = LoadResult([burst], start_s=10.0, end_s=20.0, client_cpu_s=0.1, wall_s=21.0)
    mix = served_mix(result, counters(0, 0, 0), counters(2, 10, 0))
    assert mix.sampled_rows == 4 and mix.rows == 10 + 4 - 1
    assert mix.context_positions == (10 + 2) * 2
