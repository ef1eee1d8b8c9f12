"""A search's GPU bill from what it ran (autotune.search.gpu_bill)."""

from __future__ import annotations

import pytest

from autotune.search.gpu_bill import bill_lines, bill_table, search_events, search_totals, unrecorded
from autotune.search.trial_report import TrialEntry, TrialReport
from autotune.trial.gpu_time import GpuTime
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult


def _result(gpu_time: GpuTime | None, *, baseline: bool = False) -> TrialResult:
    return TrialResult(status=Status.FEASIBLE, reason=None, params={}, is_baseline=baseline, gpu_time=gpu_time)


def _entry(tid: str, result: TrialResult | None, base: TrialResult | None = None) -> TrialEntry:
    return TrialEntry(tid, {}, TrialReport(objective=None, constraints={"failed": 0.0}, result=result,
                                           baseline=base))


RAN = GpuTime(gpus=2, startup_s=60.0, warmup_s=10.0, measure_s=30.0, teardown_s=2.0)  # 204 GPU-s
BASE = GpuTime(gpus=2, startup_s=50.0, warmup_s=5.0, measure_s=20.0, teardown_s=1.0)  # 152 GPU-s
CRASHED = GpuTime(gpus=2, startup_s=8.0, teardown_s=1.0)  # 18 GPU-s


def test_each_server_goes_to_its_stage_and_the_overhead_to_the_trials() -> None:
    entries = [_entry("a", _result(RAN), _result(BASE, baseline=True)),  # measured its group's baseline
               _entry("b", _result(CRASHED)),  # crashed at start-up: still paid
               _entry("c", _result(None)),  # refused before any server started
               _entry("d", None)]  # errored inside Ray: no result at all
    finalists = [(_result(RAN), _result(BASE, baseline=True)), (_result(CRASHED), None)]
    totals = search_totals(entries, finalists, overheads=[1.0, 0.5, 0.25], overhead_gpus=[2, 2])
    assert totals.by_stage == pytest.approx({"trials": 204 + 18 + 2 + 1 + 0.25, "baselines": 152,
                                             "finalists": 204 + 152 + 18})
    assert totals.by_part["overhead"] == pytest.approx(3.25)  # the third overhead's GPUs: 1 (not given)
    assert totals.servers == {"trials": 2, "baselines": 1, "finalists": 3}
    assert totals.gpu_s == pytest.approx(sum(totals.by_stage.values()))
    assert unrecorded(entries) == 2
    with pytest.raises(ValueError, match="overhead GPU counts"):
        search_events(entries, overheads=[1.0], overhead_gpus=[1, 2])


def test_the_console_and_summary_md_say_the_total_and_the_split() -> None:
    totals = search_totals([_entry("a", _result(RAN), _result(BASE, baseline=True))], overheads=[2.0],
                           overhead_gpus=[2])
    lines = bill_lines(totals, unrecorded_trials=1)
    assert lines[0] == "GPU time: 360.0 GPU-s"
    assert "start-up 220.0" in lines[1] and "tuner overhead 4.0" in lines[1]
    assert "trials 208.0 (1 servers)" in lines[2] and "baselines 152.0 (1 servers)" in lines[2]
    assert "1 trial(s) started no server" in lines[3]
    table = bill_table(totals)
    assert table[0] == "| part | trials | baselines | finalists | total |"
    assert "| start-up | 120.0 | 100.0 | 0.0 | 220.0 |" in table
    assert "| **total** | 208.0 | 152.0 | 0.0 | **360.0** |" in table
    assert "| servers started | 1 | 1 | 0 | 2 |" in table
