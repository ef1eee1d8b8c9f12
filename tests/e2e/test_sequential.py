"""Sequential measurement in a whole search: real Ray, emulator servers, MLflow (sqlite in tmp_path).

Each trial measures in rounds, reports every round to Ray Tune as an intermediate result, and stops
as soon as it is separated from the incumbent; the searcher, the callback and MLflow take only the
final report as its result. The spaces (``tests/spaces/sequential*.yaml``) put the incumbent first
(the grid's order, checked here) and the next config 2-4x away from it, far beyond a loaded box's
noise, so each decision is certain.
"""

from __future__ import annotations

import io
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from autotune.figures import shown
from autotune.search.console import print_summary
from autotune.search.options import SearchOptions
from autotune.search.run import run_search
from tests.e2e.test_search import SPACES, _assert_no_emulator_left, _mlflow, _study


def _search(space: str, root: Path) -> tuple[Any, str]:
    out = io.StringIO()
    outcome = run_search(SearchOptions(space=str(SPACES / space), root=str(root)), out=out)
    print_summary(outcome, out=out)
    return outcome, out.getvalue()


def _ray_reports(experiment_path: str) -> dict[str, list[dict[str, Any]]]:
    """Every result each trial reported to Ray Tune, in order, by its speculative_algorithm."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in Path(experiment_path).glob("*/result.json"):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out[str(rows[0]["config"]["speculative_algorithm"])] = rows
    return out


def _assert_rounds_then_one_final(rows: list[dict[str, Any]], *, decision: str, rounds: range) -> int:
    """One intermediate report per round (the last with the decision), then the final result;
    returns the rounds, which must lie in ``rounds``.

    Where a comparison decides, the rounds are a range below the cap, not one count: on a loaded box
    a stalled reading (one round of a clearly better config once read 37% below its others) widens
    the interval, and the rule rightly measures another round before it decides.
    """
    rounds_run = len(rows) - 1
    assert rounds_run in rounds, f"{rounds_run} rounds, expected {rounds}"
    rounds = rounds_run
    assert [r["final"] for r in rows] == [False] * rounds + [True]
    assert [r["round"] for r in rows[:-1]] == list(range(1, rounds + 1))
    assert [r["decision"] for r in rows[:-1]] == ["continue"] * (rounds - 1) + [decision]
    assert "constraints" not in rows[0] and rows[-1]["constraints"]
    # The final objective is what the rounds measured: the median of its readings, as the last round said.
    final = json.loads(rows[-1]["trial_result"])
    assert len(final["output_tok_s_repeats"]) == rounds
    assert rows[-1]["objective"] == pytest.approx(statistics.median(final["output_tok_s_repeats"]))
    assert rows[-2]["objective"] == pytest.approx(rows[-1]["objective"])
    assert final["sequential"]["decision"] == decision and final["sequential"]["rounds"] == rounds
    return rounds


@pytest.mark.slow
def test_a_losing_config_is_aborted_after_min_rounds(tmp_path: Path, sim_env: Path) -> None:
    outcome, text = _search("sequential-abort.yaml", tmp_path)
    reports = _ray_reports(outcome.experiment_path)
    first = min(reports, key=lambda k: reports[k][0]["timestamp"])
    assert first == "None", f"the grid no longer runs the baseline first: {first}"

    # The incumbent measured alone: min_rounds (2), then the EAGLE3 config was aborted before its
    # cap of 6 (at 2 rounds unless a stalled reading asked for more).
    _assert_rounds_then_one_final(reports["None"], decision="stop-alone", rounds=range(2, 3))
    rounds = _assert_rounds_then_one_final(reports["EAGLE3"], decision="stop-worse", rounds=range(2, 6))
    aborted = json.loads(reports["EAGLE3"][-1]["trial_result"])
    assert aborted["sequential"]["incumbent"] and aborted["sequential"]["max_rounds"] == 6

    # An aborted trial is a result (its measured value, marked), never a failure, in Optuna and MLflow.
    study = _study(outcome.experiment_path)
    done = study.get_trials(deepcopy=False)
    assert [t.state.name for t in done] == ["COMPLETE", "COMPLETE"]
    spec = next(t for t in done if t.params["speculative_algorithm"] == "EAGLE3")
    assert spec.value == pytest.approx(statistics.median(aborted["output_tok_s_repeats"]))
    assert spec.constraints["failed"] == 0
    _, runs = _mlflow("test-sequential-abort", tmp_path)
    trial_runs = [r for r in runs if r.kind in ("trial", "baseline") and r.tags.get("autotune.sequential")]
    by_decision = {r.tags["autotune.sequential"]: r for r in trial_runs}
    assert set(by_decision) == {"stop-alone", "stop-worse"}
    worse = by_decision["stop-worse"]
    assert worse.status == "infeasible" and worse.tags["autotune.rounds"] == str(rounds)
    assert worse.metrics["output_tok_s"] == pytest.approx(shown(aborted["output_tok_s"]), rel=1e-6)
    # The baseline wins (the draft is useless); the aborted config is no part of the answer.
    assert outcome.baseline_wins and "serve without speculative decoding" in text.lower()
    _assert_no_emulator_left(sim_env)


@pytest.mark.slow
def test_a_clearly_better_config_stops_early_and_its_evidence_settles_the_winner(
        tmp_path: Path, sim_env: Path) -> None:
    outcome, text = _search("sequential.yaml", tmp_path)
    reports = _ray_reports(outcome.experiment_path)
    first = min(reports, key=lambda k: reports[k][0]["timestamp"])
    assert first == "None", f"the grid no longer runs the baseline first: {first}"
    _assert_rounds_then_one_final(reports["None"], decision="stop-alone", rounds=range(3, 4))
    _assert_rounds_then_one_final(reports["EAGLE3"], decision="stop-better", rounds=range(3, 6))

    # Decisive evidence: no finalist re-measured, no fresh server; the winner carries its interval.
    assert outcome.finalists == [] and "Finalists not re-measured" in text
    margin = outcome.margin
    assert margin is not None and margin["decisive"] and margin["source"] == "trials"
    pays = margin["over_break_even"]
    assert pays["separated"] and 1 < pays["low"] < pays["ratio"] < pays["high"]
    assert pays["confidence"] == 0.95
    md = outcome.report_files["summary.md"]
    assert "decided by the trials' evidence (not re-measured)" in md
    assert margin["line"] in md and "over break-even" in md and "[+" in md
    assert margin["line"] in text
    parent, runs = _mlflow("test-sequential", tmp_path)
    assert not [r for r in runs if r.kind == "finalist"]
    assert parent.data.tags["autotune.winner_margin"] == margin["line"]
    _assert_readable(outcome, parent, runs, md)
    _assert_no_emulator_left(sim_env)


def _assert_readable(outcome: Any, parent: Any, runs: list[Any], md: str) -> None:
    """What a person reads in MLflow after a real search (issue 35): the console's counts, the
    summary's top as the description, the winner marked and first, each run as long as its trial."""
    m = parent.data.metrics
    assert (m["trials"], m["feasible_trials"], m["infeasible_trials"], m["failed_trials"]) == (
        outcome.trials, outcome.feasible, outcome.infeasible, outcome.failed)
    note = parent.data.tags["mlflow.note.content"]
    assert md.startswith(note) and "**Winner: " in note and "\n## " not in note
    winner = [r for r in runs if r.tags.get("autotune.winner") == "true"]
    assert [r.run_id for r in winner] == [parent.data.tags["autotune.winner_run_id"]]
    assert winner[0].metric("rank") == 1.0
    from mlflow import MlflowClient

    client = MlflowClient(outcome.tracking_uri)
    for run in runs:
        info = client.get_run(run.run_id).info
        took = (info.end_time - info.start_time) / 1000
        # The trial's own clock (seconds of server start and rounds), not the instant of logging.
        assert took > 1.0 and took == pytest.approx(run.metric("duration_s"), abs=0.1), (run.trial_id, took)
