"""Every PEFT adapter of ../shared/oracle/lora/ against PEFT's own answers, through the runner.

Oracle (see its README): four real PEFT 0.21 adapters -- qwen3-tiny-lora-a (r 8 on q/k/v/o),
qwen3-tiny-lora-b (rslora, r 4 on gate/up/down), llama32-tiny-lora (all-linear) and
smol-135m-lora (r 8 on q/v/o/down over the real SmolLM2 Q4_1 GGUF, whose Q/K rows the
loader un-permutes) -- with greedy ids with the adapter and without it, and top-5 logprobs.

Each adapter is run twice: its rows and plain base rows in the SAME batches of the model
runner with merging off (engine/model/lora_batch.py: the base matmul for all rows, the
adapter's product on its rows only), so every row must come out with its own answer; and
its rows alone, every step on its merged weights (engine/model/lora_merge.py).
"""
from __future__ import annotations

import functools
import json

import pytest

from engine.model.loader import load_model
from engine.model.lora import load_adapter
from engine.model.spec import Model
from tests.engine.model.lora_runs import Row, RowResult, greedy_rows
from tests.oracle import ORACLE_DIR, REPO_ROOT

LORA_DIR = ORACLE_DIR / "lora"
BASES = {"qwen3-tiny-lora-a": ORACLE_DIR / "families" / "qwen3-tiny" / "model",
         "qwen3-tiny-lora-b": ORACLE_DIR / "families" / "qwen3-tiny" / "model",
         "llama32-tiny-lora": ORACLE_DIR / "families" / "llama32-tiny" / "model",
         "smol-135m-lora": REPO_ROOT / "artifacts" / "models" / "smol-135m"}
LOGPROB_TOLERANCE = 1e-3        # README: float32 summation order alone moves ~1e-4
# Ids are compared up to the first step whose top1-top2 margin is below this (README: all
# are above 2e-3 here, so every id is compared).
MARGIN_TOLERANCE = 1e-3


@functools.cache
def _base(path) -> Model:
    return load_model(path)


def _cases(adapter: str, name: str) -> list[dict]:
    with open(LORA_DIR / adapter / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _assert_ids(got: list[int], want: list[int], margins: list[float], what: str) -> None:
    low = [k for k, m in enumerate(margins) if m < MARGIN_TOLERANCE]
    trusted = low[0] if low else len(want)
    assert got[:trusted] == want[:trusted], what
    if trusted == len(want):
        assert got == want, what


def _assert_logprobs(result: RowResult, case: dict) -> None:
    assert len(result.top5) >= case["n_positions"]
    for k, (want_top, want_chosen) in enumerate(zip(case["top5"], case["chosen_logprob"])):
        got_top = result.top5[k]
        assert abs(result.chosen_logprob[k] - want_chosen) <= LOGPROB_TOLERANCE, k
        for (got_id, got_lp), (want_id, want_lp) in zip(got_top, want_top):
            assert abs(got_lp - want_lp) <= LOGPROB_TOLERANCE, (k, want_id)
            if got_id != want_id:       # only neighbours within the tolerance may swap
                neighbours = {t for t, lp in want_top if abs(lp - want_lp) <= LOGPROB_TOLERANCE}
                assert got_id in neighbours, (k, got_id, want_id)


@pytest.mark.parametrize("adapter_name", sorted(BASES))
def test_adapter_rows_and_base_rows_in_one_batch_match_peft(adapter_name):
    base = _base(BASES[adapter_name])
    adapter = load_adapter(LORA_DIR / adapter_name, base.config)
    cases = _cases(adapter_name, "greedy.jsonl")
    rows = [Row(tuple(c["prompt_ids"]), adapter, c["max_tokens"]) for c in cases]
    rows += [Row(tuple(c["prompt_ids"]), None, c["max_tokens"]) for c in cases]
    run = greedy_rows(base, rows, stop_ids=cases[0]["stop_ids"], lora_merge=False)
    assert run.merges.merged_steps_total == 0 < run.merges.grouped_steps_total
    with_adapter, plain = run.results[:len(cases)], run.results[len(cases):]
    for case, got in zip(cases, with_adapter):
        _assert_ids(got.ids, case["adapter_ids"], case["adapter_step_top1_top2_logit_margin"],
                    f"adapter, prompt {case['index']}")
    for case, got in zip(cases, plain):
        _assert_ids(got.ids, case["base_ids"], case["base_step_top1_top2_logit_margin"],
                    f"base, prompt {case['index']}")
    for case in _cases(adapter_name, "logprobs.jsonl"):
        _assert_logprobs(with_adapter[case["index"]], case)
    assert sum(c["differs"] for c in cases) >= 5      # the adapter really changes answers


@pytest.mark.parametrize("adapter_name", sorted(BASES))
def test_adapter_rows_alone_run_on_merged_weights_and_match_peft(adapter_name):
    """The same cases with no base row beside them: every step holds one adapter alone, so
    every step runs on its merged weights (engine/model/lora_merge.py), and must still be
    PEFT's (ids, and logprobs within the tolerance)."""
    base = _base(BASES[adapter_name])
    adapter = load_adapter(LORA_DIR / adapter_name, base.config)
    cases = _cases(adapter_name, "greedy.jsonl")
    rows = [Row(tuple(c["prompt_ids"]), adapter, c["max_tokens"]) for c in cases]
    run = greedy_rows(base, rows, stop_ids=cases[0]["stop_ids"])
    assert run.merges.grouped_steps_total == 0 < run.merges.merged_steps_total
    assert run.merges.merges_built_total == 1
    for case, got in zip(cases, run.results):
        _assert_ids(got.ids, case["adapter_ids"], case["adapter_step_top1_top2_logit_margin"],
                    f"adapter, prompt {case['index']}")
    for case in _cases(adapter_name, "logprobs.jsonl"):
        _assert_logprobs(run.results[case["index"]], case)


def test_two_adapters_and_the_base_in_one_batch_each_get_their_own_answer():
    """qwen3-tiny-lora-a and -b share the base and the prompts: 18 rows, interleaved, in
    the same steps; each row must give its own adapter's answer (or the base's)."""
    base = _base(BASES["qwen3-tiny-lora-a"])
    adapters = {name: load_adapter(LORA_DIR / name, base.config)
                for name in ("qwen3-tiny-lora-a", "qwen3-tiny-lora-b")}
    cases = {name: _cases(name, "greedy.jsonl") for name in adapters}
    rows, wanted = [], []
    for index in range(len(cases["qwen3-tiny-lora-a"])):
        for name in ("qwen3-tiny-lora-a", None, "qwen3-tiny-lora-b"):
            case = cases[name or "qwen3-tiny-lora-a"][index]
            rows.append(Row(tuple(case["prompt_ids"]), adapters.get(name), case["max_tokens"]))
            key = "adapter" if name else "base"
            wanted.append((case[f"{key}_ids"], case[f"{key}_step_top1_top2_logit_margin"],
                           f"{name or 'base'}, prompt {index}"))
    results = greedy_rows(base, rows, stop_ids=cases["qwen3-tiny-lora-a"][0]["stop_ids"]).results
    for got, (ids, margins, what) in zip(results, wanted):
        _assert_ids(got.ids, ids, margins, what)
    a_ids = [c["adapter_ids"] for c in cases["qwen3-tiny-lora-a"]]
    b_ids = [c["adapter_ids"] for c in cases["qwen3-tiny-lora-b"]]
    assert a_ids != b_ids                               # the two adapters answer differently
