"""What a person reads in MLflow: the winner marked and first, real run times, rounded figures, the
search run's description, and the saved view that orders them. Real sqlite stores (tests/conftest.py's
``store`` and ``tracker``), the durable spool path beside the direct one."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from autotune.figures import shown
from autotune.search.options import SearchOutcome
from autotune.search.summary_files import SUMMARY_MD, rows_of, summary_md
from autotune.search.trial_report import TrialReport
from autotune.tracking import ui_links
from autotune.tracking.durable import DurableTracker
from autotune.tracking.runs import METRIC_RANK, TAG_WINNER, TrialRun, Winner, display_order
from autotune.tracking.summary import search_description
from autotune.tracking.tracker import Tracker
from tests.tracking_helpers import eagle, failed, result


def _runs(tr: Tracker) -> dict[str, TrialRun]:
    return {r.trial_id or "": r for r in tr.trial_runs()}


def _view_order(tr: Tracker) -> list[str]:
    """The trial ids in the order the saved view asks MLflow for (its orderByKey, ascending)."""
    state = json.loads(json.loads(tr.client.get_experiment(tr.experiment_id).tags[ui_links.VIEW_TAG])["state"])
    key = state["orderByKey"].replace("`", "")
    found = tr.client.search_runs([tr.experiment_id], f"tags.`mlflow.parentRunId` = '{tr.parent_run_id}'",
                                  order_by=[f"{key} {'ASC' if state['orderByAsc'] else 'DESC'}"])
    return [r.data.tags["autotune.trial_id"] for r in found]


# --- pure functions -----------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (1.95876288, 1.959), (1958.7628, 1958.8), (0.00123456, 0.001235), (123456.78, 123456.8), (1650.0, 1650.0),
    (-0.0123456, -0.01235), (0.0, 0.0)])
def test_shown_keeps_four_significant_digits_and_at_least_one_decimal(value: float, expected: float) -> None:
    assert shown(value) == expected


def _run(trial_id: str, status: str, tok_s: float | None, *, kind: str = "trial") -> TrialRun:
    return TrialRun(run_id=f"r-{trial_id}", trial_id=trial_id, kind=kind, status=status, reason=None,
                    mlflow_status="FINISHED", is_baseline=kind == "baseline", confirmed=False,
                    metrics={} if tok_s is None else {"output_tok_s": tok_s, "ttft_ms_p99": tok_s / 10},
                    params={})


def test_display_order_puts_the_winner_first_then_feasible_runs_best_first_and_no_other() -> None:
    runs = [_run("slow", "feasible", 1100.0), _run("fast", "infeasible", 1900.0), _run("won", "feasible", 1200.0),
            _run("mid", "feasible", 1500.0), _run("lost", "failed", None), _run("base", "feasible", 1000.0,
                                                                               kind="baseline")]
    won = Winner(runs[2], False, "confirmed")
    assert display_order(runs, won) == ["r-won", "r-mid", "r-slow", "r-base"]
    # The objective's direction: the lowest p99 TTFT first after the winner.
    assert display_order(runs, won, objective="p99_ttft_ms", maximize=False) == ["r-won", "r-base", "r-slow",
                                                                                 "r-mid"]
    # A derived baseline (no speculative config won) does not put the run it came from first.
    assert display_order(runs, Winner(runs[1], True, "derived")) == ["r-mid", "r-won", "r-slow", "r-base"]
    assert display_order(runs, None)[0] == "r-mid"


def test_the_description_is_summary_md_up_to_its_first_section() -> None:
    won = result(eagle(3, 1), 1480.0)
    md = summary_md(SearchOutcome(name="s", winner=won.to_dict(), baseline=None, trials=2, feasible=2, infeasible=0,
                                  failed=0, interrupted=False, baseline_wins=False, finalists=[], tracking_uri=None,
                                  parent_run_id=None, experiment_path=None, overheads_s=[]),
                    rows_of([("t1", won.params, TrialReport(objective=1480.0, constraints={}, result=won))]))
    text = search_description(md)
    assert text is not None and md.startswith(text) and "\n## " not in text
    assert text.startswith("# autotune search `s`") and "2 trials: 2 feasible" in text and "**Winner: " in text
    assert search_description("") is None and search_description(None) is None


def test_an_older_view_is_outdated_and_this_one_is_not() -> None:
    tag = ui_links.view_tags(created_ms=1)[ui_links.VIEW_TAG]
    assert not ui_links.view_outdated(tag)
    old = json.dumps({"name": "autotune: trials, fastest first", "createdAt": 1, "state": json.dumps(
        {"orderByKey": "metrics.`output_tok_s`", "orderByAsc": False, "selectedColumns": []})})
    assert ui_links.view_outdated(old) and ui_links.view_outdated(None) and ui_links.view_outdated("{")


# --- a real store ---------------------------------------------------------------------------


@pytest.mark.slow  # the MLflow store
def test_the_winner_is_tagged_and_first_in_the_view_though_not_the_fastest(tracker: Tracker) -> None:
    tracker.log_trial("base", result({}, 1000.0))
    tracker.log_trial("t0", result(eagle(3, 1), 1500.0))
    tracker.log_trial("t1", result(eagle(5, 1), 1800.0, status="infeasible", reason="p99 TTFT over its SLO"))
    tracker.log_trial("t2", result(eagle(4, 1), 1600.0))
    tracker.log_trial("t3", failed(eagle(8, 8, 64)))
    # Re-measured, t0 held up; t2 was never confirmed: the confirmed finalist wins (trial.winner's rule 1).
    tracker.log_trial("finalist-t0", result(eagle(3, 1), 1480.0), kind="finalist", confirmed=True)
    summary = tracker.finish_search()
    assert summary.winner is not None and summary.winner.run.trial_id == "finalist-t0"
    runs = _runs(tracker)
    assert {t for t, r in runs.items() if r.tags.get(TAG_WINNER) == "true"} == {"finalist-t0"}
    assert {t: r.metric(METRIC_RANK) for t, r in runs.items()} == {
        "finalist-t0": 1.0, "t2": 2.0, "t0": 3.0, "base": 4.0, "t1": None, "t3": None}
    order = _view_order(tracker)
    assert order[:4] == ["finalist-t0", "t2", "t0", "base"] and set(order[4:]) == {"t1", "t3"}
    assert f"tags.{TAG_WINNER}" in ui_links.COLUMNS  # the marker is a column of the view


@pytest.mark.slow  # the MLflow store
def test_a_search_finished_again_moves_the_marker_and_the_places(tracker: Tracker) -> None:
    tracker.log_trial("base", result({}, 1000.0))
    tracker.log_trial("t0", result(eagle(3, 1), 1500.0))
    tracker.log_trial("t1", result(eagle(2, 1), 1300.0))
    tracker.finish_search()
    assert _runs(tracker)["t0"].tags.get(TAG_WINNER) == "true"
    # Resumed: a faster trial, and t1 measured again as failed.
    tracker.use_search_run(tracker.parent_run_id)
    tracker.log_trial("t9", result(eagle(4, 1), 1700.0))
    tracker.log_trial("t1", failed(eagle(2, 1)))
    tracker.finish_search()
    runs = _runs(tracker)
    assert {t for t, r in runs.items() if TAG_WINNER in r.tags} == {"t9"}
    assert runs["t9"].metric(METRIC_RANK) == 1.0 and runs["t0"].metric(METRIC_RANK) == 2.0
    lost = runs["t1"].metric(METRIC_RANK)
    assert lost is not None and math.isnan(lost)  # no place any more: after every number
    assert _view_order(tracker)[:4] == ["t9", "t0", "base", "t1"]


@pytest.mark.slow  # the MLflow store
@pytest.mark.parametrize("durable", [False, True], ids=["direct", "spooled"])
def test_a_trial_run_starts_and_ends_when_the_trial_did(tracker: Tracker, tmp_path: Path, durable: bool) -> None:
    began = time.time() - 60.0
    writer = DurableTracker(tracker, tmp_path / "tracking", say=lambda line: None) if durable else tracker
    writer.log_trial("t0", result(eagle(3, 1), 1500.0, started_at=began, duration_s=15.25))
    before = int(time.time() * 1000)
    writer.log_trial("t1", result(eagle(2, 1), 1400.0))  # no clock of its own (a result from before)
    runs = {r.trial_id: tracker.client.get_run(r.run_id).info for r in tracker.trial_runs()}
    assert runs["t0"].start_time == int(began * 1000)
    assert runs["t0"].end_time == int((began + 15.25) * 1000)  # the UI's Duration: 15.2 s, not the log's instant
    assert runs["t1"].start_time >= before and runs["t1"].end_time >= runs["t1"].start_time


@pytest.mark.slow  # the MLflow store
def test_metrics_are_rounded_as_shown_and_the_description_is_the_summary_top(tracker: Tracker) -> None:
    tracker.log_trial("t0", result(eagle(3, 1), 1958.7628, baseline_tok_s=1000.0, accept=2.87654321,
                                   output_tok_s_repeats=[1950.123456, 1958.7628, 1961.98765]))
    tracker.log_to_search(metrics={"winner_margin": 1.0381234})
    run = _runs(tracker)["t0"]
    assert run.metric("output_tok_s") == 1958.8 and run.metric("speedup") == 1.959
    assert run.metric("accept_length") == 2.877
    history = tracker.client.get_metric_history(run.run_id, "output_tok_s_repeat")
    assert sorted(m.value for m in history) == [1950.1, 1958.8, 1962.0]
    summary = tracker.finish_search(report_files={SUMMARY_MD: "# autotune search `x`\n\n1 trials.\n\n## More\n"})
    parent = tracker.client.get_run(tracker.parent_run_id).data
    assert parent.metrics["winner_margin"] == 1.038 and parent.metrics["winner_speedup"] == 1.959
    assert parent.metrics["feasible_baselines"] == 0 and summary.counts["finalists"] == 0
    assert parent.tags["mlflow.note.content"] == "# autotune search `x`\n\n1 trials."


@pytest.mark.slow  # the MLflow store
def test_an_experiment_with_an_older_view_gets_this_one(store: Path) -> None:
    tr = Tracker("old-view", root=store).connect()
    old = json.dumps({"name": "old", "createdAt": 1, "state": "{}"})
    tr.client.set_experiment_tag(tr.experiment_id, ui_links.VIEW_TAG, old)
    Tracker("old-view", root=store).connect()
    tag = tr.client.get_experiment(tr.experiment_id).tags[ui_links.VIEW_TAG]
    assert not ui_links.view_outdated(tag) and json.loads(tag)["name"] == ui_links.VIEW_NAME
