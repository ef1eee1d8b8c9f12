"""``search.trial_report.TrialReport``: the one report of a finished trial, across Ray and into Optuna."""

from __future__ import annotations

import io
import math

import optuna
import pytest
from ray.tune.utils import flatten_dict

from autotune.search.progress import ProgressTable
from autotune.search.trial_report import UNMEASURED_ATTR, TrialReport
from autotune.trial.result import TrialResult


def _result(**kw) -> TrialResult:
    base = dict(status="feasible", reason=None, params={"speculative_num_steps": 3}, is_baseline=False,
                output_tok_s=120.0, speedup=1.2, accept_length=2.5, feasible=True, duration_s=4.0,
                phases={"cycle_ms": 20.0, "verify_ms": 15.0})
    return TrialResult(**{**base, **kw})


def _report(**kw) -> TrialReport:
    base = dict(objective=120.0, constraints={"failed": 0.0, "break_even": -0.2},
                attrs={"status": "feasible", "phases": {"verify_ms": 15.0, "draft_ms": None}},
                result=_result(), baseline=_result(is_baseline=True, output_tok_s=100.0, speedup=1.0,
                                                   duration_s=2.5, params={}),
                baseline_key="group-1")
    return TrialReport(**{**base, **kw})


@pytest.mark.parametrize("flatten", [False, True], ids=["nested", "flattened by Tune"])
def test_a_report_crosses_ray_unchanged(flatten: bool) -> None:
    report = _report()
    metrics = report.to_metrics()
    back = TrialReport.from_metrics(flatten_dict(metrics) if flatten else metrics)
    assert back is not None
    assert back.objective == report.objective and back.baseline_key == "group-1"
    assert back.constraints == report.constraints
    assert back.attrs == report.attrs  # nested attrs rebuilt from Tune's "a/b" keys
    assert back.result.to_dict(records=True) == report.result.to_dict(records=True)
    assert back.baseline.to_dict(records=True) == report.baseline.to_dict(records=True)
    assert back.measured_s == pytest.approx(6.5)
    # Ray's own result files show the verdict too.
    assert metrics["status"] == "feasible" and metrics["output_tok_s"] == 120.0 and metrics["feasible"] is True


def test_metrics_that_carry_no_report_are_none() -> None:
    assert TrialReport.from_metrics(None) is None
    assert TrialReport.from_metrics({}) is None
    assert TrialReport.from_metrics({"done": True, "training_iteration": 1}) is None


def test_unknown_stays_unknown_across_ray() -> None:
    failed = _result(status="failed", reason="crashed", output_tok_s=None, speedup=None, accept_length=None,
                     feasible=False, phases=None)
    back = TrialReport.from_metrics(_report(objective=None, result=failed, baseline=None).to_metrics())
    assert back.objective is None and back.output_tok_s is None and back.speedup is None
    assert back.status == "failed" and back.feasible is False and back.reason == "crashed"


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_tell_sets_attrs_and_constraints_and_never_tells_a_made_up_value(direction: str) -> None:
    study = optuna.create_study(direction=direction)
    maximize = direction == "maximize"
    known, unknown = study.ask(), study.ask()
    _report().tell(study, known, maximize=maximize)
    _report(objective=None).tell(study, unknown, maximize=maximize)
    a, b = study.get_trials(deepcopy=False)
    assert a.value == 120.0 and UNMEASURED_ATTR not in a.user_attrs
    assert a.constraints == {"failed": 0.0, "break_even": -0.2}
    assert a.user_attrs["phases"] == {"verify_ms": 15.0, "draft_ms": None}
    assert b.user_attrs[UNMEASURED_ATTR] is True
    assert math.isinf(b.value) and (b.value < 0) == maximize  # worse than any measurement
    assert study.best_trial.number == a.number


def test_a_report_without_a_trial_reads_its_attrs() -> None:
    # bench_search's oracle: no TrialResult, only what the samplers would read.
    report = TrialReport(objective=None, constraints={"failed": 1.0},
                         attrs={"status": "failed", "is_baseline": True, "output_tok_s": None})
    assert report.status == "failed" and report.is_baseline and not report.feasible
    assert report.output_tok_s is None and report.measured_s == 0.0
    assert report.record() == {"status": "failed", "output_tok_s": None, "speedup": None, "feasible": False}


def test_a_capped_trial_row_says_what_the_server_ran() -> None:
    note = "ran 48 of 64; 16 queued; server cap 48; 41% of the window was tail"
    out = io.StringIO()
    table = ProgressTable(out)
    params = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}
    for tid, capped in (("t-capped", True), ("t-free", False)):
        res = TrialResult(status="feasible", reason=None, params=params, is_baseline=False, output_tok_s=2900.0,
                          speedup=1.1, load_capped=capped, load_note=note if capped else None)
        table.row(trial=tid, params=params, report=TrialReport(objective=2900.0, constraints={}, result=res))
    lines = out.getvalue().splitlines()
    flagged = [ln for ln in lines if "capped load:" in ln]
    assert flagged == [f"{'':>18}-> capped load: {note}"]
    # The flag follows its own trial's row, and the uncapped trial has none.
    assert "t-capped" in lines[lines.index(flagged[0]) - 1]


@pytest.mark.parametrize("flatten", [False, True], ids=["nested", "flattened by Tune"])
def test_a_trial_stopped_after_a_round_reads_as_stopped_never_as_a_result(flatten: bool) -> None:
    from autotune.search.trial_report import round_metrics
    from autotune.trial.gpu_time import GpuTime
    from autotune.trial.result import stopped_result

    spent = GpuTime(gpus=2, startup_s=10.0, warmup_s=3.0, measure_s=8.0)
    stopped = stopped_result({"speculative_num_steps": 5}, is_baseline=False, rounds=2, cap=6,
                             tok_s=[90.0, 95.0], gpu_time=spent, sequential={"readings": [0.9, 0.95]})
    metrics = round_metrics(number=2, readings=[0.9, 0.95], decision="continue", stopped=stopped)
    back = TrialReport.from_metrics(flatten_dict(metrics) if flatten else metrics)
    assert back is not None and back.status == "stopped" and back.feasible is False
    # Unknown is None: no objective, no tok/s, no speedup; the rounds and the GPU time are kept.
    assert back.objective is None and back.output_tok_s is None and back.speedup is None
    assert back.result.output_tok_s_repeats == [90.0, 95.0]
    assert back.result.gpu_time == spent and back.result.gpu_time.gpu_s == pytest.approx(42.0)
    assert back.result.sequential["decision"] == "stopped-by-scheduler" and back.result.sequential["rounds"] == 2
    assert back.reason.startswith("stopped by the scheduler after round 2 of at most 6")


def test_a_stopped_trial_is_told_to_optuna_as_pruned_without_a_value() -> None:
    from autotune.trial.result import stopped_result

    study = optuna.create_study(direction="maximize")
    trial = study.ask({"x": optuna.distributions.IntDistribution(1, 5)})
    stopped = stopped_result({"x": 3}, is_baseline=False, rounds=2, cap=4, tok_s=[50.0, 51.0], gpu_time=None)
    TrialReport(objective=None, constraints={}, attrs={"status": "stopped"}, result=stopped).tell(
        study, trial, maximize=True)
    frozen = study.trials[0]
    assert frozen.state == optuna.trial.TrialState.PRUNED and frozen.value is None
    assert frozen.user_attrs["status"] == "stopped"
    with pytest.raises(ValueError):
        _ = study.best_trial  # a pruned trial is never the study's best
