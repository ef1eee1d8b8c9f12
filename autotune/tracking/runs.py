"""Reading trial runs back from MLflow, and choosing the winner.

Shared by :mod:`autotune.tracking.tracker` (the parent run's summary) and :mod:`autotune.export.launch_command` (the
command it writes); the winner comes from :mod:`autotune.trial.winner`, as the search's own does.
Nothing here imports MLflow: it works on the ``Run`` objects a client returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from autotune.figures import finite
from autotune.trial.level_results import LoadLevel, as_level, metric_suffix
from autotune.trial.outcome import Status
from autotune.trial.winner import FINALIST, TRIAL, Contender, metric_field, pick_per_level, pick_winner

# Tag names. Every tag autotune writes starts with "autotune.".
TAG_KIND = "autotune.kind"
TAG_TRIAL_ID = "autotune.trial_id"
TAG_STATUS = "autotune.status"
TAG_REASON = "autotune.reason"
TAG_CONFIRMED = "autotune.confirmed"
TAG_IS_BASELINE = "autotune.is_baseline"
TAG_SEARCHED = "autotune.searched_params"
TAG_STALE_METRICS = "autotune.stale_metrics"
TAG_BACKEND = "autotune.backend"
TAG_LOAD_CAPPED = "autotune.load_capped"  # true | false: the server held back part of the asked load
TAG_LOAD = "autotune.load"  # the capped trial's line: "ran 48 of 64; 16 queued; ...% of the window was tail"
TAG_LOAD_COMPARISON = "autotune.load_comparison"  # the verdict's note: the loads its speedup compares
TAG_ACCEPTANCE = "autotune.acceptance"  # synthetic | measured (autotune.space.synthetic)
TAG_SGLANG_DEFAULT = "autotune.sglang_default"  # on the search run: autotune.space.warm_start.compare_to_default
TAG_SYNTHETIC_ACCEPT = "autotune.synthetic_accept_length"
TAG_PARENT = "mlflow.parentRunId"
TAG_OBJECTIVE = "autotune.objective"  # on the search run: "<metric>:<maximize|minimize>"
TAG_DRIVER_HOST = "autotune.driver_host"
TAG_DRIVER_PID = "autotune.driver_pid"
TAG_SEARCH_NAME = "autotune.search"
TAG_WINNER_RUN = "autotune.winner_run_id"
TAG_WINNER_TRIAL = "autotune.winner_trial_id"
TAG_WINNER_NOTE = "autotune.winner_note"
TAG_ATTEMPT = "autotune.attempt"
# On the winner's trial run, after the search's end: "true" (the marker column of the saved view).
TAG_WINNER = "autotune.winner"
# MLflow's run description (markdown); a search run's is the top of its summary.md.
TAG_DESCRIPTION = "mlflow.note.content"
# A trial run's place in the saved view (autotune.tracking.ui_links), 1 the winner: display_order.
METRIC_RANK = "rank"
# On a trial run measured at several load levels: {"<level key>": "<verdict>", ...} (keys "8" for
# concurrency 8, "r2.5" for 2.5 requests/s: autotune.trial.level_results.LoadLevel.key); its figures are
# metrics with the level's suffix (speedup_c8, speedup_r2.5, autotune.trial.level_results.metric_suffix).
TAG_LEVEL_STATUS = "autotune.level_status"

KIND_SEARCH = "search"
KIND_TRIAL = "trial"
KIND_BASELINE = "baseline"
KIND_FINALIST = "finalist"
TRIAL_KINDS = (KIND_TRIAL, KIND_BASELINE, KIND_FINALIST)



class RunInfoLike(Protocol):
    """What autotune reads of an MLflow ``RunInfo``."""

    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def start_time(self) -> int | None: ...


class RunDataLike(Protocol):
    """What autotune reads of an MLflow ``RunData``: latest metric values, params and tags."""

    @property
    def metrics(self) -> Mapping[str, float]: ...
    @property
    def params(self) -> Mapping[str, str]: ...
    @property
    def tags(self) -> Mapping[str, str]: ...


class RunLike(Protocol):
    """An ``mlflow.entities.Run``, or the export's own sqlite reading of one
    (:class:`autotune.tracking.search_reader.StoredRun`)."""

    @property
    def info(self) -> RunInfoLike: ...
    @property
    def data(self) -> RunDataLike: ...


@dataclass(frozen=True)
class TrialRun:
    """One nested trial run as read back from MLflow.

    Attributes:
        run_id: The MLflow run id.
        trial_id: The Ray trial id it is keyed by.
        kind: ``trial``, ``baseline`` or ``finalist``.
        status: autotune's verdict (``feasible``, ``infeasible``, ``failed``), None while running.
        reason: Why it is not feasible, if it is not.
        mlflow_status: ``RUNNING``, ``FINISHED``, ``FAILED`` or ``KILLED``.
        is_baseline: Speculation off.
        confirmed: Re-measured as a finalist and still feasible (set by the search).
        metrics: Latest value of each metric, minus metrics a later re-log did not report.
        params: The launch's server args and env vars, as strings (MLflow params are text).
        searched: Names of the searched parameters (the rest are fixed for the search).
        start_time: Milliseconds since the epoch.
    """

    run_id: str
    trial_id: str | None
    kind: str
    status: str | None
    reason: str | None
    mlflow_status: str
    is_baseline: bool
    confirmed: bool
    metrics: Mapping[str, float]
    params: Mapping[str, str]
    searched: tuple[str, ...] = ()
    start_time: int | None = None
    tags: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_run(cls, run: RunLike) -> TrialRun:
        """Summarise an ``mlflow.entities.Run`` (or a :class:`RunLike`)."""
        tags = dict(run.data.tags)
        stale = set(_json_list(tags.get(TAG_STALE_METRICS)))
        metrics = {k: v for k, v in run.data.metrics.items() if k not in stale}
        kind = tags.get(TAG_KIND, KIND_TRIAL)
        return cls(
            run_id=run.info.run_id, trial_id=tags.get(TAG_TRIAL_ID), kind=kind,
            status=tags.get(TAG_STATUS), reason=tags.get(TAG_REASON) or None,
            mlflow_status=run.info.status,
            is_baseline=tags.get(TAG_IS_BASELINE, str(kind == KIND_BASELINE).lower()) == "true",
            confirmed=tags.get(TAG_CONFIRMED) == "true", metrics=metrics,
            params=dict(run.data.params), searched=tuple(_json_list(tags.get(TAG_SEARCHED))),
            start_time=run.info.start_time, tags=tags)

    def metric(self, name: str) -> float | None:
        """A metric's latest value, None when it was never measured."""
        return self.metrics.get(name)

    @property
    def output_tok_s(self) -> float | None:
        return self.metric("output_tok_s")

    def level_status(self, level: LoadLevel | int) -> str | None:
        """The run's verdict at one load level; None when it has no such level."""
        levels = _json_dict(self.tags.get(TAG_LEVEL_STATUS))
        if not levels and self.status == Status.FAILED:
            return self.status  # failed before measuring any level: failed at every level
        return levels.get(as_level(level).key)

    def levels(self) -> list[LoadLevel]:
        """The load levels the run measured, in order; empty for a single level."""
        return [LoadLevel.from_key(k) for k in _json_dict(self.tags.get(TAG_LEVEL_STATUS))]


def trial_runs_of(runs: Iterable[RunLike]) -> list[TrialRun]:
    """The trial, baseline and finalist runs among a search's child runs (MLflow ``Run`` objects or
    :class:`autotune.tracking.search_reader.StoredRun`), in their order."""
    return [TrialRun.from_run(r) for r in runs if r.data.tags.get(TAG_KIND) in TRIAL_KINDS]


def _json_list(text: str | None) -> list[str]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def _json_dict(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Winner:
    """The run to export and what it measured.

    Attributes:
        run: The chosen run.
        derived_baseline: True when no baseline run was logged and the winner is the
            no-speculation twin of ``run``'s launch (export strips its speculative settings, and
            the measured figures are that run's ``baseline_tok_s``).
        note: One line on why this run won.
    """

    run: TrialRun
    derived_baseline: bool
    note: str

    @property
    def is_baseline(self) -> bool:
        return self.derived_baseline or self.run.is_baseline

    @property
    def output_tok_s(self) -> float | None:
        return self.run.metric("baseline_tok_s") if self.derived_baseline else self.run.output_tok_s

    @property
    def baseline_tok_s(self) -> float | None:
        return self.run.metric("baseline_tok_s") if not self.run.is_baseline else self.run.output_tok_s

    @property
    def speedup(self) -> float | None:
        return 1.0 if self.is_baseline and self.output_tok_s is not None else self.run.metric("speedup")

    @property
    def accept_length(self) -> float | None:
        return None if self.is_baseline else self.run.metric("accept_length")


def objective_of(tags: Mapping[str, str] | None) -> tuple[str, bool]:
    """The search's objective from its parent run's tags: (metric, maximize).

    Searches logged before the tag existed ranked by ``output_tok_s``, maximised.
    """
    text = (tags or {}).get(TAG_OBJECTIVE) or ""
    metric, _, direction = text.partition(":")
    return (metric or "output_tok_s"), direction != "minimize"


def select_winner(runs: Iterable[TrialRun], *, objective: str = "output_tok_s",
                  maximize: bool = True) -> Winner | None:
    """The winner of a search's runs, by the one policy (:mod:`autotune.trial.winner`).

    Runs of kind ``trial`` and ``finalist`` are its candidates, a confirmed finalist is a
    ``finalist``-stage candidate, and baseline runs are baselines. One fallback is MLflow's own:
    with no baseline run logged at all and no speculative winner, the winner is derived, the
    no-speculation twin of the run whose measured ``baseline_tok_s`` is best (by tok/s).

    Args:
        runs: The search's trial runs (:meth:`Tracker.trial_runs`).
        objective: The metric the search ranked by (a schema name such as ``p99_ttft_ms``).
        maximize: Its direction.

    Returns:
        The winner, or None when nothing feasible was measured.
    """
    field_name = metric_field(objective)
    runs = [r for r in runs if r.kind in TRIAL_KINDS]
    cands = [Contender(ref=r, value=finite(r.metric(field_name)), is_baseline=r.is_baseline,
                       feasible=r.status == Status.FEASIBLE,
                       stage=FINALIST if r.kind == KIND_FINALIST else TRIAL) for r in runs]
    pick = pick_winner(cands, maximize=maximize)
    if pick is not None:
        return Winner(pick.ref, False, pick.note)
    if any(r.is_baseline for r in runs):
        return None  # baselines were measured and none is feasible (an SLO): nothing to derive
    measured = [(tok_s, r) for r in runs if (tok_s := r.metric("baseline_tok_s")) is not None]
    best = max(measured, key=lambda m: m[0], default=None)
    source = None if best is None else best[1]
    if source is not None:
        return Winner(source, True, "no speculative config beat its baseline; exporting the baseline "
                                    f"measured for trial {source.trial_id} (speculation removed)")
    return None


def display_order(runs: Iterable[TrialRun], winner: Winner | None, *, objective: str = "output_tok_s",
                  maximize: bool = True) -> list[str]:
    """The run ids in the order a person reads them: the winner first (not a derived baseline's
    source, which did not win itself), then every other feasible run with a known objective value,
    best first. Runs not feasible, or unmeasured, have no place: they never read as contenders.

    Args:
        runs: The search's trial runs.
        winner: :func:`select_winner`'s pick (the one policy), None when nothing won.
        objective: The metric the search ranked by. maximize: Its direction.
    """
    field_name = metric_field(objective)
    first = winner.run.run_id if winner is not None and not winner.derived_baseline else None
    rest = [(value, r.run_id) for r in runs if r.run_id != first and r.status == Status.FEASIBLE
            and (value := finite(r.metric(field_name))) is not None]
    rest.sort(key=lambda pair: -pair[0] if maximize else pair[0])
    return ([first] if first else []) + [run_id for _, run_id in rest]


def search_levels(runs: Iterable[TrialRun]) -> list[LoadLevel]:
    """The load levels a search's runs were measured at (in order); empty for one level."""
    for run in runs:
        if run.levels():
            return run.levels()
    return []


def select_level_winners(runs: Iterable[TrialRun], levels: Iterable[LoadLevel | int], *,
                         objective: str = "output_tok_s",
                         maximize: bool = True) -> dict[LoadLevel, Winner | None]:
    """The winner at each load level, by the one policy applied per level
    (:func:`autotune.trial.winner.pick_per_level`): each run valued by the objective's metric at
    that level (``output_tok_s_c8``) and judged by its verdict there (``autotune.level_status``).
    A run without the level (another workload) does not compete there.
    """
    field_name = metric_field(objective)
    runs = [r for r in runs if r.kind in TRIAL_KINDS]

    wanted = [as_level(level) for level in levels]

    def at(level: LoadLevel) -> list[Contender]:
        return [Contender(ref=r, value=finite(r.metric(field_name + metric_suffix(level))),
                          is_baseline=r.is_baseline,
                          feasible=r.level_status(level) == Status.FEASIBLE,
                          stage=FINALIST if r.kind == KIND_FINALIST else TRIAL)
                for r in runs if r.level_status(level) is not None]

    picks = pick_per_level(wanted, at, maximize=maximize)
    return {level: None if p is None else Winner(p.ref, False, p.note) for level, p in picks.items()}


__all__ = ["METRIC_RANK", "TAG_DESCRIPTION", "TAG_WINNER",
           "KIND_BASELINE", "KIND_FINALIST", "KIND_SEARCH", "KIND_TRIAL", "RunLike", "TAG_BACKEND", "TAG_CONFIRMED",
           "TAG_IS_BASELINE", "TAG_KIND", "TAG_LEVEL_STATUS", "TAG_PARENT", "TAG_REASON", "TAG_SEARCHED",
           "TAG_STALE_METRICS", "TAG_OBJECTIVE", "TAG_STATUS", "TAG_TRIAL_ID", "TRIAL_KINDS", "TrialRun", "Winner",
           "display_order", "objective_of", "search_levels", "select_level_winners", "select_winner",
           "trial_runs_of"]
