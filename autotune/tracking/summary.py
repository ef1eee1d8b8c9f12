"""The end of a search on its parent run: summary metrics, winner tags, plots and the winner's files.

:meth:`autotune.tracking.tracker.Tracker.finish_search` delegates here. It reads every trial run
back from the store (so trials logged by Ray workers count), so it needs nothing of the tracker
but its public calls; what it logged comes back as a :class:`SearchSummary`.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.figures import finite, shown
from autotune.tracking.content import study_from_runs, trial_point
from autotune.tracking.runs import (
    KIND_BASELINE,
    KIND_FINALIST,
    METRIC_RANK,
    TAG_DESCRIPTION,
    TAG_SGLANG_DEFAULT,
    TAG_WINNER,
    TAG_WINNER_NOTE,
    TAG_WINNER_RUN,
    TAG_WINNER_TRIAL,
    TrialRun,
    Winner,
    display_order,
    objective_of,
    select_winner,
)
from autotune.tracking.store import MAX_TAG, log_batch, retry
from autotune.trial.outcome import Status

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from optuna import Study

    from autotune.tracking.tracker import Tracker

#: The report file whose top is the search run's description (the search's ``summary.md``).
SUMMARY_REPORT = "summary.md"


@dataclass
class SearchSummary:
    """What :meth:`Tracker.finish_search` logged on the parent run.

    Attributes:
        parent_run_id: The search's run.
        winner: The winning run (see :func:`autotune.tracking.runs.select_winner`), None if nothing won.
        counts: The counters logged as metrics (:func:`run_counts`).
        metrics: The summary metrics logged (unknowns left out).
        plots: Artifact paths of the plots logged.
        skipped_plots: Plot -> why it was not drawn.
        export_error: Why the winner's command could not be exported, if it could not.
    """

    parent_run_id: str
    winner: Winner | None
    counts: dict[str, int]
    metrics: dict[str, float]
    plots: list[str] = field(default_factory=list)
    skipped_plots: dict[str, str] = field(default_factory=dict)
    export_error: str | None = None


def finish_search(tracker: Tracker, parent: str, *, study: Study | None, status: str,
                  sglang_default: Mapping[str, Any] | None,
                  winner_files: Callable[[Tracker, Winner], Mapping[str, str]] | None,
                  report_files: Mapping[str, str] | None = None) -> SearchSummary:
    """Summarise the search run ``parent`` and end it (the arguments are :meth:`Tracker.finish_search`'s).

    Reads every trial run back from the store (so trials logged by workers count), picks the
    winner (:func:`autotune.tracking.runs.select_winner`), and logs: summary metrics (winner tok/s,
    speedup and accept length, baseline tok/s, :func:`run_counts`), the winner's run and trial ids
    as tags, the top of ``report_files["summary.md"]`` as the run's description, the winner tag and
    every run's place in the saved view on the trial runs (:func:`_mark_order`), the
    files ``winner_files`` renders for the winner under ``winner/``, and the plots under ``plots/``:
    tok/s against steps by topk, accept length against break-even, and Optuna's parameter
    importance, parallel-coordinate and slice views (of ``study``, or of a study rebuilt from the
    runs).
    """
    client = tracker.client
    runs = tracker.trial_runs(parent)
    metric, maximize = objective_of(retry(lambda: client.get_run(parent)).data.tags)
    winner = select_winner(runs, objective=metric, maximize=maximize)
    counts = run_counts(runs)
    metrics: dict[str, float] = {k: float(v) for k, v in counts.items()}
    tags: dict[str, str] = {}
    description = search_description((report_files or {}).get(SUMMARY_REPORT))
    if description is not None:
        tags[TAG_DESCRIPTION] = description
    if winner is not None:
        for name, value in (("winner_output_tok_s", winner.output_tok_s),
                            ("winner_speedup", winner.speedup),
                            ("winner_accept_length", winner.accept_length),
                            ("baseline_tok_s", winner.baseline_tok_s)):
            number = finite(value)
            if number is not None:
                metrics[name] = number
        tags.update({TAG_WINNER_RUN: winner.run.run_id, TAG_WINNER_TRIAL: winner.run.trial_id or "",
                     TAG_WINNER_NOTE: winner.note,
                     "autotune.winner_is_baseline": str(winner.is_baseline).lower()})
    else:
        tags[TAG_WINNER_NOTE] = "no feasible trial: nothing to export"
    if sglang_default is not None:
        tags[TAG_SGLANG_DEFAULT] = json.dumps(sglang_default, default=str, sort_keys=True)
        for name, value in (("sglang_default_output_tok_s", sglang_default.get("output_tok_s")),
                            ("sglang_default_speedup", sglang_default.get("speedup")),
                            ("gain_over_sglang_default", sglang_default.get("gain"))):
            number = finite(value)
            if number is not None:
                metrics[name] = number
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    log_batch(client, parent, metrics=[Metric(k, shown(v), now, 0) for k, v in metrics.items()], tags=tags)
    _mark_order(client, runs, winner, metric=metric, maximize=maximize, now=now)
    summary = SearchSummary(parent_run_id=parent, winner=winner, counts=counts, metrics=metrics)
    _log_plots(client, parent, runs, study, winner, summary)
    if winner is not None and winner_files is not None:
        summary.export_error = _log_winner_command(tracker, parent, winner, winner_files)
    if report_files:
        _log_files(client, parent, report_files, "report")
    retry(lambda: client.set_terminated(parent, status=status))
    return summary


def run_counts(runs: list[TrialRun]) -> dict[str, int]:
    """The search run's counters of the runs beside its trials, each named for what it counts:
    ``baselines`` (every baseline run: those measured beside the trials, and a searched
    no-speculation config's), ``finalists`` (the finalists re-measured) and the feasible ones of
    each. The trials' own counters (``trials``, ``feasible_trials``, ...) are the search's, as its
    console says them (:func:`autotune.search.conclude.finish` logs them from its outcome)."""
    def count(kind: str, status: str | None = None) -> int:
        return sum(r.kind == kind and (status is None or r.status == status) for r in runs)

    return {"baselines": count(KIND_BASELINE), "feasible_baselines": count(KIND_BASELINE, Status.FEASIBLE),
            "finalists": count(KIND_FINALIST), "feasible_finalists": count(KIND_FINALIST, Status.FEASIBLE)}


def search_description(summary_md: str | None) -> str | None:
    """The search run's description (MLflow's ``mlflow.note.content``): the top of its ``summary.md``,
    up to the first section (``## ...``); None without one."""
    if not summary_md or not summary_md.strip():
        return None
    top = summary_md.split("\n## ", 1)[0].strip()
    return top[:MAX_TAG]


def _mark_order(client: MlflowClient, runs: list[TrialRun], winner: Winner | None, *, metric: str,
                maximize: bool, now: int) -> None:
    """Tag the winner's run ``autotune.winner=true`` and give every run its place in the saved view
    (the metric :data:`~autotune.tracking.runs.METRIC_RANK`, :func:`~autotune.tracking.runs.display_order`).

    A search finished again (resumed) moves both: the tag leaves a run that no longer wins, and a
    run that lost its place gets a NaN rank (MLflow cannot delete a metric; a NaN sorts after every
    number, and a reader treats it as unknown).
    """
    from mlflow.entities import Metric

    won = winner.run.run_id if winner is not None and not winner.derived_baseline else None
    order = display_order(runs, winner, objective=metric, maximize=maximize)
    place = {run_id: i + 1 for i, run_id in enumerate(order)}
    for run in runs:
        tags = {TAG_WINNER: "true"} if run.run_id == won else {}
        if run.run_id != won and run.tags.get(TAG_WINNER) is not None:
            retry(partial(client.delete_tag, run.run_id, TAG_WINNER))
        rank = float(place[run.run_id]) if run.run_id in place else (
            math.nan if finite(run.metric(METRIC_RANK)) is not None else None)
        metrics = [Metric(METRIC_RANK, rank, now, 0)] if rank is not None else []
        if tags or metrics:
            log_batch(client, run.run_id, metrics=metrics, tags=tags)


def _log_plots(client: MlflowClient, parent: str, runs: list[TrialRun], study: Study | None,
               winner: Winner | None, summary: SearchSummary) -> None:
    from autotune.tracking import _plots

    points = [trial_point(r) for r in runs if not r.is_baseline]
    base = winner.baseline_tok_s if winner is not None else None
    figures, skipped = {}, {}
    # As for a trial's picture: a plotting failure is a skipped plot with its reason.
    for stem, draw in (("tok_s_by_steps", lambda: _plots.tok_s_by_steps_figure(points, baseline_tok_s=base)),
                       ("accept_vs_break_even", lambda: _plots.accept_vs_break_even_figure(points))):
        try:
            fig = draw()
        except Exception as exc:  # noqa: BLE001 - any plotting failure
            skipped[stem] = f"could not draw it: {type(exc).__name__}: {exc}"
            continue
        if fig is None:
            skipped[stem] = "no trial has the figures it plots"
        else:
            figures[stem] = fig
    if study is None:
        study = study_from_runs(runs)
    if study is None:
        skipped.update({k: "no study and too few trial runs to rebuild one"
                        for k in ("param_importances", "parallel_coordinate", "slice")})
    else:
        try:
            more, why = _plots.optuna_figures(study)
        except Exception as exc:  # noqa: BLE001
            more, why = {}, {k: f"could not draw it: {type(exc).__name__}: {exc}"
                             for k in ("param_importances", "parallel_coordinate", "slice")}
        figures.update(more)
        skipped.update(why)
    with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
        for stem, fig in figures.items():
            fig.savefig(Path(tmp) / f"{stem}.png", dpi=100)
            summary.plots.append(f"plots/{stem}.png")
        if skipped:
            (Path(tmp) / "skipped.json").write_text(json.dumps(skipped, indent=2))
        retry(lambda: client.log_artifacts(parent, tmp, "plots"))
    summary.skipped_plots = skipped


def _log_winner_command(tracker: Tracker, parent: str, winner: Winner,
                        winner_files: Callable[[Tracker, Winner], Mapping[str, str]]) -> str | None:
    try:
        files = dict(winner_files(tracker, winner))
    except Exception as exc:  # noqa: BLE001 - a bad stored launch must not lose the summary
        error = f"{type(exc).__name__}: {exc}"
        log_batch(tracker.client, parent, tags={"autotune.export_error": error})
        return error
    _log_files(tracker.client, parent, files, "winner")
    # A format that could not be rendered is logged as NAME.error.txt beside the others.
    failed = {name[: -len(".error.txt")]: text.strip() for name, text in files.items()
              if name.endswith(".error.txt")}
    if not failed:
        return None
    error = "; ".join(f"{name}: {why}" for name, why in sorted(failed.items()))
    log_batch(tracker.client, parent, tags={"autotune.export_error": error})
    return error


def _log_files(client: MlflowClient, parent: str, files: Mapping[str, str], folder: str) -> None:
    with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
        for name, text in files.items():
            (Path(tmp) / name).write_text(text)
        retry(lambda: client.log_artifacts(parent, tmp, folder))
