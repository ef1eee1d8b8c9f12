"""A Ray Tune scheduler (``search.scheduler``) in a whole search: real Ray and ASHA, emulator servers,
MLflow (sqlite in tmp_path).

A trial measuring in rounds reports each round to Ray Tune; ASHA compares the rounds and stops a
trial below its rung's cutoff. The stopped trial is recorded ``stopped`` with its rounds and GPU
time (console, summary.md, trials.csv, MLflow), told to Optuna as PRUNED without a value, and is
never the winner; its server dies with it. The space (``tests/spaces/scheduler.yaml``) puts the
baseline first (the grid's order, checked here) and the EAGLE3 config about 4x slower, so ASHA's
decision after round 1 is certain however loaded the box.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import optuna
import pytest

from autotune.search.console import print_summary
from autotune.search.options import SearchOptions
from autotune.search.run import run_search
from tests.e2e.test_search import SPACES, _assert_no_emulator_left, _mlflow, _study
from tests.e2e.test_sequential import _ray_reports


@pytest.mark.slow
def test_a_trial_the_scheduler_stops_is_recorded_stopped_with_its_rounds_and_gpu_time(
        tmp_path: Path, sim_env: Path) -> None:
    out = io.StringIO()
    outcome = run_search(SearchOptions(space=str(SPACES / "scheduler.yaml"), root=str(tmp_path)), out=out)
    print_summary(outcome, out=out)
    text = out.getvalue()
    reports = _ray_reports(outcome.experiment_path)
    first = min(reports, key=lambda k: reports[k][0]["timestamp"])
    assert first == "None", f"the grid no longer runs the baseline first: {first}"

    # The baseline ran its rounds and its final report; ASHA cut EAGLE3 after round 1, before any
    # final report (the last thing Ray has of it is that round).
    assert [r["final"] for r in reports["None"]] == [False, False, True]
    eagle = reports["EAGLE3"]
    assert [r["final"] for r in eagle] == [False] and eagle[0]["round"] == 1
    assert eagle[0]["round_objective"] < 0.6 * reports["None"][0]["round_objective"]

    # A distinct outcome, neither lost nor failed nor interrupted, and never the answer.
    assert not outcome.interrupted and outcome.trials == 2
    assert (outcome.stopped, outcome.failed, outcome.feasible) == (1, 0, 1)
    assert outcome.baseline_wins
    assert "1 stopped after a round" in text
    assert "stopped by the scheduler after round 1 of at most 4" in text
    md = outcome.report_files["summary.md"]
    assert "1 stopped after a round" in md

    rows = list(csv.DictReader(io.StringIO(outcome.report_files["trials.csv"])))
    stopped_rows = [r for r in rows if r["status"] == "stopped"]
    assert len(stopped_rows) == 1
    row = stopped_rows[0]
    # Unknown is None: no objective figure; the GPU time up to the stop is counted, teardown unseen.
    assert row["output_tok_s"] == "" and float(row["gpu_s"]) > 0 and float(row["time_startup_s"]) > 0
    assert row["time_teardown_s"] == ""
    assert outcome.gpu_time is not None and outcome.gpu_time["unrecorded_trials"] == 0

    # Optuna: PRUNED, no value; the baseline complete.
    study = _study(outcome.experiment_path)
    states = {str(t.params["speculative_algorithm"]): t for t in study.get_trials(deepcopy=False)}
    assert states["EAGLE3"].state == optuna.trial.TrialState.PRUNED and states["EAGLE3"].value is None
    assert states["None"].state == optuna.trial.TrialState.COMPLETE

    # MLflow: a run of its own, status stopped, its round and GPU time; the search run counts it.
    parent, runs = _mlflow("test-scheduler", tmp_path)
    stopped_runs = [r for r in runs if r.status == "stopped"]
    assert len(stopped_runs) == 1
    run = stopped_runs[0]
    assert run.tags["autotune.sequential"] == "stopped-by-scheduler" and run.tags["autotune.rounds"] == "1"
    assert run.mlflow_status == "KILLED"  # stopped from outside: not FINISHED like a good trial
    assert run.metrics.get("gpu_s", 0) > 0 and "output_tok_s" not in run.metrics
    assert parent.data.metrics["stopped_trials"] == 1.0
    _assert_no_emulator_left(sim_env)
