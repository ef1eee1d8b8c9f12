"""Reading trial runs back from MLflow, and choosing the winner.

Shared by :mod:`autotune.tracking` (the parent run's summary) and :mod:`autotune.export` (the
command it writes), so both always name the same winner. Nothing here imports MLflow: it works on
the ``Run`` objects a client returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
TAG_ACCEPTANCE = "autotune.acceptance"  # synthetic | measured (autotune.synthetic)
TAG_SGLANG_DEFAULT = "autotune.sglang_default"  # on the search run: autotune.warm_start.compare_to_default
TAG_SYNTHETIC_ACCEPT = "autotune.synthetic_accept_length"
TAG_PARENT = "mlflow.parentRunId"

KIND_SEARCH = "search"
KIND_TRIAL = "trial"
KIND_BASELINE = "baseline"
KIND_FINALIST = "finalist"
TRIAL_KINDS = (KIND_TRIAL, KIND_BASELINE, KIND_FINALIST)


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
    def from_run(cls, run: Any) -> TrialRun:
        """Summarise an ``mlflow.entities.Run``."""
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


def _json_list(text: str | None) -> list[str]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


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


def select_winner(runs: Iterable[TrialRun]) -> Winner | None:
    """The best confirmed feasible speculative run; else the best feasible one; else the baseline.

    The rules, in order:

    1. Speculative candidates are feasible runs of kind ``trial`` or ``finalist`` with a known
       ``output_tok_s``. If any of them is confirmed (re-measured as a finalist), only confirmed
       ones compete. The fastest wins.
    2. A feasible baseline run that is faster still wins instead: feasibility only says a config
       beats the baseline of *its own* non-speculative settings, and another group's baseline can
       be faster overall.
    3. With no feasible speculative run, the fastest feasible baseline run wins.
    4. With no baseline run logged at all, the winner is derived: the no-speculation twin of the
       run whose measured ``baseline_tok_s`` is highest.

    Returns:
        The winner, or None when nothing feasible was measured.
    """
    runs = [r for r in runs if r.kind in TRIAL_KINDS]
    spec = [r for r in runs if not r.is_baseline and r.status == "feasible" and r.output_tok_s is not None]
    confirmed = [r for r in spec if r.confirmed]
    pool = confirmed or spec
    best = max(pool, key=lambda r: r.output_tok_s, default=None)
    bases = [r for r in runs if r.is_baseline and r.status == "feasible" and r.output_tok_s is not None]
    best_base = max(bases, key=lambda r: r.output_tok_s, default=None)
    which = "confirmed " if confirmed else ""
    if best is not None and (best_base is None or best.output_tok_s > best_base.output_tok_s):
        return Winner(best, False, f"fastest {which}feasible speculative config")
    if best_base is not None:
        why = ("a no-speculation baseline is faster than every feasible speculative config"
               if best is not None else "no speculative config beat its baseline")
        return Winner(best_base, False, why)
    if any(r.is_baseline for r in runs):
        return None  # baselines were measured and none is feasible (an SLO): nothing to derive
    measured = [r for r in runs if r.metric("baseline_tok_s") is not None]
    source = max(measured, key=lambda r: r.metric("baseline_tok_s"), default=None)
    if source is not None:
        return Winner(source, True, "no speculative config beat its baseline; exporting the baseline "
                                    f"measured for trial {source.trial_id} (speculation removed)")
    return None


__all__ = ["KIND_BASELINE", "KIND_FINALIST", "KIND_SEARCH", "KIND_TRIAL", "TAG_BACKEND", "TAG_CONFIRMED",
           "TAG_IS_BASELINE", "TAG_KIND", "TAG_PARENT", "TAG_REASON", "TAG_SEARCHED", "TAG_STALE_METRICS",
           "TAG_STATUS", "TAG_TRIAL_ID", "TRIAL_KINDS", "TrialRun", "Winner", "select_winner"]
