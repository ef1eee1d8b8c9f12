"""Trials Ray Tune stopped between rounds reach the console and MLflow once each, whichever way Ray
ended them: a scheduler's stop goes through the callback's ``on_trial_complete``; the wall-time
budget stops running trials without telling the callbacks, so the driver records those from the
result grid (``SearchCallback.record_unseen``). The callback logs through a real durable tracker on
a sqlite store; Ray's trial object is a stand-in carrying the attributes the callback reads.
"""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.search.callbacks import SearchCallback, SearchLedger
from autotune.search.progress import ProgressTable
from autotune.search.trial_report import TrialEntry, TrialReport, round_metrics
from autotune.tracking.durable import DurableTracker
from autotune.tracking.tracker import Tracker
from autotune.trial.gpu_time import GpuTime
from autotune.trial.result import stopped_result


def _stopped_round(params: dict, *, by: str) -> dict:
    stopped = stopped_result(params, is_baseline=False, rounds=2, cap=6, tok_s=[80.0, 82.0],
                             gpu_time=GpuTime(startup_s=5.0, warmup_s=1.0, measure_s=2.0), by=by)
    return round_metrics(number=2, readings=[80.0, 82.0], decision="continue", stopped=stopped)


@pytest.mark.slow  # an MLflow sqlite store's creation takes seconds under load
def test_stopped_trials_are_recorded_once_however_ray_stopped_them(tmp_path: Path) -> None:
    tracker = Tracker("stopped", root=str(tmp_path)).connect()
    tracker.start_search()
    out = io.StringIO()
    callback = SearchCallback(table=ProgressTable(out), tracker=DurableTracker(tracker, tmp_path / "tracking"),
                              ledger=SearchLedger(), key="k")
    callback.setup()
    by_scheduler = SimpleNamespace(trial_id="sched1", config={"speculative_num_steps": 3},
                                   last_result=_stopped_round({"speculative_num_steps": 3}, by="the scheduler"))
    by_budget = SimpleNamespace(trial_id="budget1", config={"speculative_num_steps": 5},
                                last_result=_stopped_round({"speculative_num_steps": 5}, by="the wall-time budget"))
    for trial in (by_scheduler, by_budget):
        callback.on_trial_start(0, [], trial)
    callback.on_trial_complete(0, [], by_scheduler)  # the scheduler's stop: Ray tells the callbacks
    # The result grid at the end holds both, and one a resumed search's earlier session recorded.
    grid = [TrialEntry(t.trial_id, dict(t.config), TrialReport.from_metrics(t.last_result))
            for t in (by_scheduler, by_budget)]
    earlier = TrialEntry("earlier1", {"speculative_num_steps": 7},
                         TrialReport.from_metrics(_stopped_round({"speculative_num_steps": 7}, by="the scheduler")))
    callback.record_unseen([*grid, earlier])

    runs = {r.trial_id: r for r in tracker.trial_runs()}
    assert set(runs) == {"sched1", "budget1"}  # once each; none for the earlier session's trial
    assert {r.status for r in runs.values()} == {"stopped"}
    # Stopped from outside, by the scheduler or the budget: MLflow's KILLED, never FINISHED like a good trial.
    assert {r.mlflow_status for r in runs.values()} == {"KILLED"}
    assert runs["budget1"].tags["autotune.reason"].startswith("stopped by the wall-time budget after round 2")
    assert runs["sched1"].tags["autotune.reason"].startswith("stopped by the scheduler after round 2")
    assert [e.trial_id for e in callback.ledger.results] == ["sched1", "budget1"]
    text = out.getvalue()
    assert text.count("stopped by the scheduler after round 2") == 1
    assert text.count("stopped by the wall-time budget after round 2") == 1 and "earlier1" not in text
