"""Ray Tune's OptunaSearch, taught constraints and the phase data a model-based sampler needs.

Ray's ``OptunaSearch.on_trial_complete`` only calls ``study.tell(value)``. Here, before telling,
each Optuna trial gets:

- its constraint values (``<= 0`` is feasible): break-even (speculation must beat its baseline),
  each SLO, and "the config failed";
- user attrs with what the trial measured (phase profile, accept length, baseline), so samplers
  such as :class:`autotune.search.samplers.PhaseModelSampler` read results through Optuna's normal path.

A config that fails (OOM, crash) is a *result* with a violated constraint, so TPE learns from it.
Only infrastructure errors (a Ray worker lost) arrive with ``error=True`` and become FAIL.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

import optuna
from ray.tune.search.optuna import OptunaSearch

from autotune.trial.winner import unmeasured_value

log = logging.getLogger(__name__)

# Keys of a trial's reported result that this module reads.
OBJECTIVE = "objective"
CONSTRAINTS = "constraints"          # dict name -> float, <= 0 feasible
ATTRS = "sampler_attrs"              # dict copied into Optuna user attrs


def _section(result: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """``result[key]`` as a nested dict, or None when the result has no such section.

    Tune hands searchers the result flattened (``flatten_dict``: ``{"constraints/failed": 0.0,
    "sampler_attrs/phases/draft_ms": ...}``); a caller outside Tune may pass it nested.
    """
    value = result.get(key)
    if isinstance(value, Mapping):
        return dict(value)
    prefix = key + "/"
    out: dict[str, Any] = {}
    for name, leaf in result.items():
        if not name.startswith(prefix):
            continue
        node = out
        *parents, last = name[len(prefix):].split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = leaf
    return out or None


class DefineByRun:
    """Picklable define-by-run function: the space's own ``suggest``."""

    def __init__(self, space: Any) -> None:
        self.space = space

    def __call__(self, trial: Any) -> dict[str, Any]:
        params = self.space.suggest(trial)
        return {k: v for k, v in params.items() if k not in trial.params}


class ConstrainedOptunaSearch(OptunaSearch):
    """``OptunaSearch`` that sets constraints and user attrs before telling Optuna."""

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # One final result per trial: nothing to report as an intermediate value.
        return None

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        if trial_id in self._completed_trials:
            return
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is None:
            return
        constraints = _section(result, CONSTRAINTS) if result and not error else None
        if constraints is None:
            super().on_trial_complete(trial_id, result=None, error=True)
            return
        for key, value in (_section(result, ATTRS) or {}).items():
            ot_trial.set_user_attr(key, value)
        for key, value in constraints.items():
            ot_trial.set_constraint(key, float(value))
        value = result.get(OBJECTIVE)
        if value is None or not math.isfinite(value):
            ot_trial.set_user_attr("objective_unmeasured", True)
            value = unmeasured_value(maximize=self._mode == "max")
        try:
            self._ot_study.tell(ot_trial, float(value), state=optuna.trial.TrialState.COMPLETE)
        except Exception as exc:  # Optuna refuses a value: keep the search going, say why.
            log.warning("Optuna refused trial %s: %s", trial_id, exc)
        self._completed_trials.add(trial_id)

    @property
    def study(self) -> optuna.Study:
        return self._ot_study
