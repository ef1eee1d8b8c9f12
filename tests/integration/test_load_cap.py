"""The load a server really ran, on emulator servers whose running-request cap is forced or SGLang's own.

The emulator keeps SGLang's running batch: at most ``max_running_requests`` run, the rest wait in its
queue, and ``/metrics`` shows both gauges. Every measured window must be flagged exactly when the
server held part of the asked concurrency back, for the config and for its baseline alike.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.space.search_space import SearchSpace
from autotune.space.workload import Workload
from autotune.trial.baselines import MemoryBaselineStore, group_key
from autotune.trial.measure import evaluate, measure
from autotune.trial.measure_settings import MeasureSettings
from autotune.trial.result import TrialResult

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

CHAIN = {"speculative_num_steps": 3, "speculative_num_draft_tokens": 4}


def space(*, fixed: dict[str, Any], workload: dict[str, Any]) -> SearchSpace:
    return SearchSpace.from_dict({
        "name": "load-cap", "backend": "sim", "profile": "llama-3.1-8b-eagle3-h100",
        "model_path": "sim/Llama-3.1-8B-Instruct", "draft_model_path": "sim/EAGLE3-LLaMA3.1-Instruct-8B",
        "fixed_args": {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1, **fixed},
        "parameters": {"speculative_num_steps": {"type": "int", "low": 3, "high": 3},
                       "speculative_num_draft_tokens": {"type": "int", "low": 4, "high": 4}},
        "workload": {"source": "builtin", "warmup_prompts": 1, "seed": 0, **workload},
        "measure": {"repeats": 2, "startup_timeout_s": 60}})


def settings(tmp_path: Path, repeats: int = 2) -> MeasureSettings:
    return MeasureSettings(repeats=repeats, startup_timeout_s=60, grace_s=2.0, workdir=str(tmp_path / "work"),
                           python=sys.executable, validate=False, sim_seed=1)


def levels(result: TrialResult) -> dict[int, dict[str, Any]]:
    return {lv["concurrency"]: lv for lv in result.levels or []}


def test_a_forced_cap_flags_every_window_above_it_and_none_at_or_below(sim_env: Path, tmp_path: Path) -> None:
    sp = space(fixed={"max_running_requests": 4},
               workload={"num_prompts": 16, "output_len": 48, "concurrency": [2, 4, 8],
                         "primary_concurrency": 8})
    store = MemoryBaselineStore()
    base_config = sp.trial_config({"speculative_algorithm": None})
    result = evaluate(sp.trial_config(CHAIN), workload=Workload.from_spec(sp.workload),
                      baseline_config=base_config, settings=settings(tmp_path), store=store)
    baseline = store.get(group_key(base_config))
    assert baseline is not None
    for r in (result, baseline):
        at = levels(r)
        assert sorted(at) == [2, 4, 8]
        for c in (2, 4):  # at or below the cap: the server ran what was asked
            assert at[c]["load_cap"] == 4 and at[c]["load_asked"] == c
            assert at[c]["load_capped"] is False and at[c]["load_capped_windows"] == 0
            assert at[c]["load_note"] is None
        # Above it, both repeats' windows are flagged, with what the server really ran and queued.
        top = at[8]
        assert top["load_capped"] is True and top["load_capped_windows"] == 2
        assert top["load_ran"] == 4 and 1 <= top["load_queued"] <= 4
        assert top["load_note"].startswith("ran 4 of 8; 4 queued; server cap 4; ")
        assert top["load_note"].endswith("% of the window was tail")
    # The trial's own figures are its primary level's (8), and the verdict says at what load it compared.
    assert result.load_capped is True and result.load_ran == 4
    assert levels(result)[8]["load_comparison"] == (
        "compared at the load each sustained: this config ran 4 of 8 (capped), its baseline 4 of 8 (capped)")
    assert levels(result)[2]["load_comparison"] is None


def test_sglangs_own_cap_for_a_speculative_config_holds_64_at_48(sim_env: Path, tmp_path: Path) -> None:
    # No max_running_requests: SGLang sets 48 for every speculative config and queues the rest.
    sp = space(fixed={}, workload={"num_prompts": 64, "output_len": 96, "concurrency": 64})
    result = measure(sp.trial_config(CHAIN), Workload.from_spec(sp.workload), settings(tmp_path, repeats=1))
    assert result.ok, result.reason
    assert (result.load_asked, result.load_cap, result.load_ran) == (64, 48, 48)
    # The standing queue behind the cap: the 16 it left out (the median of the samples that saw a
    # queue; the burst of the closed loop's first sends arriving during a prefill is larger).
    assert result.load_capped is True and 8 <= result.load_queued <= 28
    assert result.load_tail_pct is not None and 0 < result.load_tail_pct < 100
    assert result.load_client_tail_pct is not None and result.load_client_tail_pct > 0
    # The prompt lengths the server counted, the workload's shape as measured.
    assert 0 < result.input_tokens_p10 <= result.input_tokens_p50 <= result.input_tokens_p90


def test_the_steady_window_speaks_at_batch_and_leaves_the_tail_out(sim_env: Path, tmp_path: Path) -> None:
    # Capped at 4 with 8 asked: the loop is full (4 running, 4 queued) until the prompts run out, then
    # a tail of fewer than 4. Concurrency 1 has no ramp or tail to leave out.
    sp = space(fixed={"max_running_requests": 4},
               workload={"num_prompts": 24, "output_len": 32, "concurrency": [1, 8], "primary_concurrency": 8})
    result = measure(sp.trial_config(CHAIN), Workload.from_spec(sp.workload), settings(tmp_path))
    assert result.ok, result.reason
    at = levels(result)
    top, one = at[8], at[1]
    assert top["window"] == "steady" and top["window_reason"] is None
    assert top["output_tok_s"] == top["output_tok_s_steady"] and top["output_tok_s_whole"] is not None
    assert top["output_tok_s_steady"] > top["output_tok_s_whole"]  # the tail ran fewer than 4
    assert 0 < top["steady_share_pct"] < 100 and top["steady_waves"] >= 1
    assert top["output_tok_s_steady_range_pct"] is not None and top["output_tok_s_whole_range_pct"] is not None
    # The trial's own figures are the primary level's, per repeat both windows in its breakdown.
    assert result.window == "steady" and result.output_tok_s == top["output_tok_s"]
    assert [row["steady_tok_s"] for row in result.repeat_breakdown] == result.output_tok_s_repeats
    assert [row["tok_s"] for row in result.repeat_breakdown] != result.output_tok_s_repeats
    assert one["window"] == "whole" and one["window_reason"] == "concurrency 1: no ramp or tail to leave out"
    assert one["output_tok_s"] == one["output_tok_s_whole"] and one["output_tok_s_steady"] is None
