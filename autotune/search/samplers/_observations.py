"""What completed Optuna trials measured, read back from their user attrs.

The search stores a trial's measurements as user attrs (keys in ``docs/samplers.md``); this module
turns a study's trials into plain records the phase model fits. Nothing here talks to a server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.figures import finite
from autotune.search.trial_report import UNMEASURED_ATTR
from autotune.trial.outcome import Status

#: System attr holding the config a planning sampler chose for a trial.
PLAN_KEY = "autotune:plan"
#: The user attrs the phase model reads (all optional; see docs/samplers.md).
USER_ATTR_KEYS = ("status", "is_baseline", "output_tok_s", "accept_length", "baseline_tok_s",
                  "baseline_decode_step_ms", "baseline_status", "speedup", "phases",
                  "spec_correct_drafts_histogram", "failure")


def _num(value: Any) -> float | None:
    """A finite positive number, else None: a sampler's figures (tok/s, ms, lengths) are never 0."""
    number = finite(value)
    return number if number is not None and number > 0 else None


@dataclass(frozen=True)
class Observation:
    """One finished trial.

    Attributes:
        number: Optuna trial number.
        index: Candidate index of its config, or None if it is not a config of the space.
        status: ``feasible``, ``infeasible`` or ``failed``.
        value: Measured objective (output tok/s), None when nothing was measured.
        is_baseline: The config itself runs without speculation.
        accept_length: Tokens per verify cycle, bonus token included.
        histogram: Cycles that accepted j draft tokens, j = 0...
        phases: ``draft_ms``, ``verify_ms``, ``extend_ms``, ``decode_ms``, ``other_ms``,
            ``cycle_ms`` (each None when unknown).
        baseline_tok_s, baseline_decode_step_ms: The group's no-speculation baseline.
        baseline_failed: The group's baseline failed to run (``baseline_status`` = failed),
            so no config of the group can be judged feasible.
        failure: A failed trial's kind (``Failure`` value, e.g. ``oom``), None when unknown.
    """

    number: int
    index: int | None
    status: str
    value: float | None
    is_baseline: bool = False
    accept_length: float | None = None
    histogram: tuple[float, ...] | None = None
    phases: Mapping[str, float | None] = field(default_factory=dict)
    baseline_tok_s: float | None = None
    baseline_decode_step_ms: float | None = None
    baseline_failed: bool = False
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != Status.FAILED and self.value is not None

    @property
    def measured(self) -> float:
        """:attr:`value` of a trial that measured one (callers have checked :attr:`ok`).

        Raises:
            ValueError: When nothing was measured.
        """
        if self.value is None:
            raise ValueError(f"trial {self.number} measured nothing")
        return self.value

    @property
    def cand(self) -> int:
        """:attr:`index` of a trial whose config is one of the space's.

        Raises:
            ValueError: When its config is not a candidate.
        """
        if self.index is None:
            raise ValueError(f"trial {self.number}'s config is not a candidate of the space")
        return self.index

    def phase(self, name: str) -> float:
        """A phase time (``cycle_ms``...) of a trial with phase data.

        Raises:
            ValueError: When that phase is unknown.
        """
        value = self.phases.get(name)
        if value is None:
            raise ValueError(f"trial {self.number} has no {name}")
        return value

    @property
    def has_phase_data(self) -> bool:
        return self.accept_length is not None and _num(self.phases.get("cycle_ms")) is not None


def _status(trial: FrozenTrial, attrs: Mapping[str, Any]) -> str:
    status = attrs.get("status")
    if status in (Status.FEASIBLE, Status.INFEASIBLE, Status.FAILED):
        return status
    if status == Status.OK:
        return Status.FEASIBLE
    constraints = trial.constraints
    if constraints.get("failed", 0.0) > 0 or attrs.get(UNMEASURED_ATTR):
        return Status.FAILED
    if any(v > 0 for v in constraints.values()):
        return Status.INFEASIBLE
    return Status.FEASIBLE


def read_observation(trial: FrozenTrial, index: int | None) -> Observation:
    """Turn a finished trial into an :class:`Observation` (missing data stays None)."""
    attrs = trial.user_attrs
    status = _status(trial, attrs)
    value = _num(attrs.get("output_tok_s"))
    if value is None and status != Status.FAILED and not attrs.get(UNMEASURED_ATTR):
        value = _num(trial.value) if trial.values is not None and len(trial.values) == 1 else None
    if value is None:
        status = Status.FAILED
    phases_raw = attrs.get("phases")
    phases = {k: _num(v) for k, v in phases_raw.items()} if isinstance(phases_raw, Mapping) else {}
    hist = attrs.get("spec_correct_drafts_histogram")
    histogram = None
    if isinstance(hist, (list, tuple)) and hist and all(_num(h) is not None or h == 0 for h in hist):
        histogram = tuple(float(h) for h in hist)
        if sum(histogram) <= 0:
            histogram = None
    is_baseline = bool(attrs.get("is_baseline", False))
    kind = attrs.get("failure")
    baseline_failed = (attrs.get("baseline_status") == Status.FAILED
                       or (is_baseline and status == Status.FAILED))
    return Observation(
        number=trial.number, index=index, status=status, value=value,
        is_baseline=is_baseline, baseline_failed=baseline_failed,
        accept_length=_num(attrs.get("accept_length")), histogram=histogram, phases=phases,
        baseline_tok_s=_num(attrs.get("baseline_tok_s")),
        baseline_decode_step_ms=_num(attrs.get("baseline_decode_step_ms")),
        failure=kind if status == Status.FAILED and isinstance(kind, str) else None)


def finished(trial: FrozenTrial) -> bool:
    """A trial whose result the samplers learn from."""
    return trial.state == TrialState.COMPLETE


def occupied(trial: FrozenTrial) -> bool:
    """A trial whose config must not be proposed again (done, or still running)."""
    return trial.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING,
                           TrialState.PRUNED)
