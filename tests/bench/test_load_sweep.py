"""bench/load_sweep.py's reading of the rows our server computed in a window (the bound's
input): prompt rows from the prefix-cache counters, sampled rows and attended positions
from the streams; and its A/B of two checkouts: the servers' order, alternating by round,
and the median after / before ratio per concurrency. The benchmark itself is never run here."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.load_client import LoadResult, StreamRecord
from bench.load_server import HIT_COUNTER, PROMPT_COUNTER, STEPS_COUNTER
from bench.load_sweep import ab_plan, ab_summary, parse_args, served_mix


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


def test_an_ab_sweep_alternates_the_checkouts_round_by_round(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    plan = ab_plan(before, after, rounds=3)
    assert [(tags["round"], tags["side"]) for tags, _ in plan] == [
        (0, "before"), (0, "after"), (1, "after"), (1, "before"), (2, "before"), (2, "after")]
    settings = {tags["side"]: setting for tags, setting in plan}
    assert settings == {"before": f"repo={before.resolve()}", "after": f"repo={after.resolve()}"}


def test_the_ab_summary_takes_the_median_of_each_rounds_ratio():
    # round ratios at 16 streams: 90/100, 60/50, 190/200 -> median 0.95 (not the ratio of
    # the medians, 90/100, nor of the sums, 340/350, nor the mean ratio, 1.017)
    tok_s = {(0, "before"): 100.0, (0, "after"): 90.0, (1, "before"): 50.0,
             (1, "after"): 60.0, (2, "before"): 200.0, (2, "after"): 190.0}
    rows = [{"streams": 16, "round": r, "side": side, "tok_s": v} for (r, side), v in tok_s.items()]
    rows += [{"streams": 1, "round": r, "side": side, "tok_s": 10.0 if side == "before" else 5.0}
             for r in range(3) for side in ("before", "after")]
    one, sixteen = ab_summary(rows)
    assert one == {"streams": 1, "before_tok_s": [10.0] * 3, "after_tok_s": [5.0] * 3,
                   "ratios": [0.5] * 3, "median_ratio": 0.5}
    assert sixteen["before_tok_s"] == [100.0, 50.0, 200.0]
    assert sixteen["after_tok_s"] == [90.0, 60.0, 190.0]
    assert sixteen["ratios"] == [0.9, 1.2, 0.95] and sixteen["median_ratio"] == 0.95


def test_an_ab_sweep_takes_both_checkouts_and_no_other_server():
    assert parse_args(["--before", "a", "--after", "b"]).before == Path("a")
    for argv in (["--before", "a"], ["--before", "a", "--after", "b", "--url", "http://x:1"],
                 ["--before", "a", "--after", "b", "--config-set", "max_num_seqs=8"],
                 ["--before", "a", "--after", "b", "--case", "prefix"]):
        with pytest.raises(SystemExit):
            parse_args(argv)
