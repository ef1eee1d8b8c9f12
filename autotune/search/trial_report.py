"""What one finished trial tells the search: :class:`TrialReport`.

One type for every layer that hears of a finished trial: the trainable builds it, the searcher
tells Optuna from it (:meth:`TrialReport.tell`, also what ``bench_search`` tells its studies
through, so the samplers see one shape of trial), the callbacks print and log it, and the search's
conclusion ranks it. Ray Tune carries only a dict of metrics from a trial's worker to the driver,
so a report crosses Ray once as :meth:`TrialReport.to_metrics` and is rebuilt by
:meth:`TrialReport.from_metrics`; nothing else reads that dict's keys.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.sequential import Decision
from autotune.trial.winner import unmeasured_value

if TYPE_CHECKING:
    import optuna

__all__ = ["FINAL", "TrialEntry", "TrialReport", "UNMEASURED_ATTR", "round_metrics"]

UNMEASURED_ATTR = "objective_unmeasured"
"""The Optuna user attr set on a trial whose objective was unknown (its value is then
:func:`~autotune.trial.winner.unmeasured_value`, never a made-up measurement)."""

# The keys of the wire form. Display fields are copied flat so that Ray's own result files and
# its progress reporter show them too.
_OBJECTIVE, _CONSTRAINTS, _ATTRS = "objective", "constraints", "sampler_attrs"
_RESULT, _BASELINE, _BASELINE_KEY = "trial_result", "baseline_result", "baseline_key"
#: True on the report that is the trial's result, False on a round's intermediate report.
FINAL = "final"
#: A round's report: the trial's result as it stands if a scheduler stops the trial there.
_STOPPED = "stopped_result"
#: A round's report: the figure a scheduler (``search.scheduler``) compares trials on, and its
#: clock. Only rounds carry them, so a scheduler never reads a final report (whose objective may
#: be None: unknown).
SCHEDULER_METRIC, SCHEDULER_TIME = "round_objective", "round"
_SHOWN = ("status", "reason", "feasible", "is_baseline", "output_tok_s", "speedup", "accept_length",
          "acceptance", "break_even_accept_length", "baseline_tok_s")


@dataclass(frozen=True)
class TrialReport:
    """A finished trial as the search sees it.

    Attributes:
        objective: The space's objective metric as measured; None when unknown (a failed trial,
            or a metric the trial did not produce).
        constraints: Optuna constraint values, ``<= 0`` feasible (``failed``, ``break_even``,
            ``slo_i``).
        attrs: What model-based samplers read (``docs/samplers.md``), set as Optuna user attrs.
        result: The measured :class:`TrialResult`; None where no trial ran (``bench_search``'s
            oracle stands in for one).
        baseline: The group's baseline when this trial measured it.
        baseline_key: The baseline group's key.
    """

    objective: float | None
    constraints: Mapping[str, float]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    result: TrialResult | None = None
    baseline: TrialResult | None = None
    baseline_key: str | None = None

    @property
    def baseline_label(self) -> str:
        """The one name of the group baseline this trial measured: its MLflow run's trial id, its
        row in ``trials.csv`` and ``per_level.json``, and what the export reads back."""
        import hashlib

        return "baseline-" + hashlib.sha1((self.baseline_key or "").encode()).hexdigest()[:12]

    def _field(self, name: str) -> Any:
        if self.result is not None:
            return getattr(self.result, name)
        return self.attrs.get(name)

    @property
    def status(self) -> str | None:
        """``feasible``, ``infeasible`` or ``failed`` (:class:`~autotune.trial.outcome.Status`)."""
        return self._field("status")

    @property
    def feasible(self) -> bool:
        """Whether the trial met every constraint."""
        if self.result is not None:
            return bool(self.result.feasible)
        return self.status == Status.FEASIBLE

    @property
    def is_baseline(self) -> bool:
        """Whether the trial ran without speculation."""
        return bool(self._field("is_baseline"))

    @property
    def reason(self) -> str | None:
        """Why the trial failed or is infeasible, if it is."""
        return self._field("reason")

    @property
    def output_tok_s(self) -> float | None:
        """End-to-end output tokens per second; None when unknown."""
        return self._field("output_tok_s")

    @property
    def speedup(self) -> float | None:
        """Over the group's baseline; None when unknown."""
        return self._field("speedup")

    @property
    def accept_length(self) -> float | None:
        """Mean accepted tokens per verify cycle; None when unknown."""
        return self._field("accept_length")

    @property
    def acceptance(self) -> str | None:
        """Where the accept length came from (``synthetic`` / ``measured``), when known."""
        return self._field("acceptance")

    @property
    def measured_s(self) -> float:
        """Seconds this trial spent measuring (its own and a baseline it measured)."""
        spent = 0.0
        for r in (self.result, self.baseline):
            if r is not None:
                spent += r.duration_s or 0.0
        return spent

    def record(self) -> dict[str, Any]:
        """The flat record ``space.warm_start.compare_to_default`` reads (without ``params``)."""
        return {"status": self.status, "output_tok_s": self.output_tok_s, "speedup": self.speedup,
                "feasible": self.feasible}

    def tell(self, study: optuna.Study, trial: optuna.Trial, *, maximize: bool) -> None:
        """Tell an Optuna study this trial: user attrs, constraints, then its value.

        An unknown objective is told as :func:`~autotune.trial.winner.unmeasured_value` (worse than
        any measurement, in the study's direction) with the user attr :data:`UNMEASURED_ATTR`. A
        trial a scheduler stopped is told ``PRUNED`` (Optuna's own state for a trial ended early),
        with no value: its config is not proposed again, and no sampler ranks it with the measured.

        Raises:
            Exception: Whatever ``study.tell`` raises.
        """
        import optuna

        for key, value in self.attrs.items():
            trial.set_user_attr(key, value)
        if self.status == Status.STOPPED:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return
        for key, value in self.constraints.items():
            trial.set_constraint(key, float(value))
        value = self.objective
        if value is None or not math.isfinite(value):
            trial.set_user_attr(UNMEASURED_ATTR, True)
            value = unmeasured_value(maximize=maximize)
        study.tell(trial, float(value), state=optuna.trial.TrialState.COMPLETE)

    def to_metrics(self) -> dict[str, Any]:
        """The dict a Ray Tune trial reports: this report on the wire."""
        out: dict[str, Any] = {_OBJECTIVE: self.objective, _CONSTRAINTS: dict(self.constraints),
                               _ATTRS: dict(self.attrs)}
        out.update({name: self._field(name) for name in _SHOWN})
        out["feasible"] = self.feasible
        out[_RESULT] = (json.dumps(self.result.to_dict(records=True), default=str)
                        if self.result is not None else None)
        out[_BASELINE] = (json.dumps(self.baseline.to_dict(records=True), default=str)
                          if self.baseline is not None else None)
        out[_BASELINE_KEY] = self.baseline_key
        out[FINAL] = True
        return out

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any] | None) -> TrialReport | None:
        """The report a trial's metrics carry, or None when they carry none (a trial that reported
        nothing: Ray lost it, or it was stopped first).

        Tune hands searchers the metrics flattened (``{"constraints/failed": 0.0, ...}``) and
        callbacks and result grids nested; both are read.
        """
        if not metrics:
            return None
        constraints = _section(metrics, _CONSTRAINTS)
        if constraints is None:
            # A trial whose last report is a round's was stopped there by a scheduler: the
            # trainable reports a final result otherwise.
            stopped = metrics.get(_STOPPED)
            if metrics.get(FINAL) is False and stopped:
                result = TrialResult.from_dict(json.loads(stopped))
                return cls(objective=None, constraints={}, result=result,
                           attrs={"status": result.status, "is_baseline": result.is_baseline,
                                  "rounds": (result.sequential or {}).get("rounds")})
            return None

        def result_of(key: str) -> TrialResult | None:
            text = metrics.get(key)
            return TrialResult.from_dict(json.loads(text)) if text else None

        objective = metrics.get(_OBJECTIVE)
        return cls(objective=None if objective is None else float(objective),
                   constraints={k: float(v) for k, v in constraints.items()},
                   attrs=_section(metrics, _ATTRS) or {}, result=result_of(_RESULT),
                   baseline=result_of(_BASELINE), baseline_key=metrics.get(_BASELINE_KEY))


def round_metrics(*, number: int, readings: Sequence[float], decision: str,
                  stopped: TrialResult | None = None) -> dict[str, Any]:
    """A round's intermediate report (``tune.report`` after each round of a trial measuring in
    rounds): the objective as measured so far (the median of the round readings, as the result's),
    also under :data:`SCHEDULER_METRIC`, the round (:data:`SCHEDULER_TIME`), the decision
    (:class:`~autotune.trial.sequential.Decision`), and ``stopped``: the trial's result should a
    scheduler stop it here. The scheduler's metric is there only when the trial goes on. It carries
    no constraints: :meth:`TrialReport.from_metrics` reads a result from it only when it is the
    trial's last report (a stopped trial).
    """
    median = statistics.median(readings) if readings else None
    out: dict[str, Any] = {_OBJECTIVE: median, SCHEDULER_TIME: number, "decision": decision, FINAL: False,
                           _STOPPED: json.dumps(stopped.to_dict(), default=str) if stopped is not None else None}
    # Only a round after which the trial goes on is the scheduler's to compare: after the last one
    # (its own rule ended it) a scheduler's stop would cut off a complete trial's final report. Left
    # out, not None: a scheduler skips a report without its metric.
    if readings and decision == Decision.CONTINUE:
        out[SCHEDULER_METRIC] = median
    return out


def _section(metrics: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """``metrics[key]`` as a nested dict, or None when there is no such section."""
    value = metrics.get(key)
    if isinstance(value, Mapping):
        return dict(value)
    prefix = key + "/"
    out: dict[str, Any] = {}
    for name, leaf in metrics.items():
        if not name.startswith(prefix):
            continue
        node = out
        *parents, last = name[len(prefix):].split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = leaf
    return out or None


class TrialEntry(NamedTuple):
    """One trial of a search as the driver keeps it: Ray's trial id, the config it ran, its report.

    A named tuple so that readers of ``(trial id, config, report)`` (``summary_files.rows_of``)
    take it as it is.
    """

    trial_id: str
    params: dict[str, Any]
    report: TrialReport
