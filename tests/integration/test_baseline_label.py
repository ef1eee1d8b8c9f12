"""A group baseline a trial measured has one name: its MLflow run's trial id, its row in
``trials.csv`` and the per-level answer, so that the export of a level the baseline wins names the
run the search named. (The search labelled it ``<trial>-baseline`` while MLflow held it as
``baseline-<hash>``; ``export --per-level`` then disagreed with the search's per-level table,
whose winners are these row labels: ``search.conclude`` builds them from ``rows_of``.)

The search's callback logs through a real durable tracker on a sqlite store, as a search does; Ray's
trial object is a stand-in carrying the three attributes the callback reads.
"""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.search.callbacks import SearchCallback, SearchLedger
from autotune.search.progress import ProgressTable
from autotune.search.summary_files import rows_of
from autotune.search.trial_report import TrialReport
from autotune.tracking.durable import DurableTracker
from autotune.tracking.tracker import Tracker
from tests.tracking_helpers import eagle, result


def _report() -> TrialReport:
    base = result({"speculative_algorithm": None}, 120.0, accept=None, break_even=None,
                  baseline_tok_s=None, is_baseline=True)
    spec = result(eagle(3, 1), 90.0, status="infeasible", baseline_tok_s=120.0)
    return TrialReport(objective=90.0, constraints={"break_even": 1.0}, result=spec, baseline=base,
                       baseline_key='{"tp_size": 1}')


@pytest.mark.slow  # 10 s at load ~8 (make test-fast leaves it out)
def test_the_baseline_a_trial_measured_has_one_name_in_mlflow_and_in_the_search_s_rows(tmp_path: Path) -> None:
    report = _report()
    tracker = Tracker("one-name", root=str(tmp_path)).connect()
    tracker.start_search()
    durable = DurableTracker(tracker, tmp_path / "tracking")  # what a search logs through
    callback = SearchCallback(table=ProgressTable(io.StringIO()), tracker=durable, ledger=SearchLedger(),
                              key="k")
    callback.setup()
    trial = SimpleNamespace(trial_id="abc123", config=dict(report.result.params),
                            last_result=report.to_metrics())
    callback.on_trial_start(0, [], trial)
    callback.on_trial_complete(0, [], trial)

    runs = {r.trial_id: r.kind for r in tracker.trial_runs()}
    rows = rows_of([("abc123", dict(report.result.params), report)])
    assert [row.trial_id for row in rows] == [report.baseline_label, "abc123"]
    assert runs == {report.baseline_label: "baseline", "abc123": "trial"}
    assert report.baseline_label.startswith("baseline-") and report.baseline_label in runs
