"""Samplers that choose a whole config of the space before the trial asks for its values.

Optuna's define-by-run asks one parameter at a time, with ranges that depend on earlier answers
(the draft-token range narrows with steps and top-k). A planning sampler picks one enumerated
config in ``before_trial``, stores it as a trial system attr (so it survives any storage and
Ray's pickling), and hands its values out in ``sample_independent``. A value the plan does not
cover, or one the distribution does not contain, comes from a fallback sampler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ConfigError
from autotune.search.samplers._candidates import CandidateTable
from autotune.search.samplers._observations import PLAN_KEY, occupied

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace


class PlannedSampler(BaseSampler):
    """Base class: subclasses implement :meth:`plan`.

    Args:
        space: The loaded ``SearchSpace`` (its enumeration is the candidate set).
        seed: Seed of the fallback sampler and of any tie-breaking.
        fallback: Sampler for values the plan does not cover; a seeded ``RandomSampler`` if None.
    """

    def __init__(self, space: SearchSpace, *, seed: int | None = None,
                 fallback: BaseSampler | None = None) -> None:
        if space is None:
            raise ValueError(f"{type(self).__name__} needs the search space (space=...)")
        for name, p in getattr(space, "parameters", {}).items():
            if p.type == "float" and p.step is None:
                raise ConfigError(
                    f"sampler {type(self).__name__} enumerates the space, but float parameter "
                    f"{name} has no step; give it a step, or use sampler: tpe",
                    file=getattr(space, "file", None), line=getattr(p, "line", None),
                    field=f"parameters.{name}.step")
        self.space = space
        self.seed = seed
        self._fallback = fallback if fallback is not None else RandomSampler(seed=seed)
        self._table: CandidateTable | None = None

    @property
    def table(self) -> CandidateTable:
        """The enumerated candidates (built on first use: enumeration can take a moment)."""
        if self._table is None:
            self._table = CandidateTable(self.space)
        return self._table

    # ------------------------------------------------------------------ to implement
    def plan(self, study: Study, trial: FrozenTrial) -> int | None:
        """Candidate index for ``trial``, or None to let the fallback sampler decide."""
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers
    def tried(self, study: Study, trial: FrozenTrial) -> np.ndarray:
        """Mask of candidates already run or running (the current trial excluded)."""
        mask = np.zeros(len(self.table), dtype=bool)
        for t in study.get_trials(deepcopy=False):
            if t.number == trial.number or not occupied(t):
                continue
            idx = self.trial_index(t)
            if idx is not None:
                mask[idx] = True
        return mask

    def trial_index(self, trial: FrozenTrial) -> int | None:
        """Candidate index of a trial's config: its plan if the params agree, else a lookup."""
        plan = trial.system_attrs.get(PLAN_KEY)
        if isinstance(plan, dict) and isinstance(plan.get("index"), int):
            idx = plan["index"]
            params = plan.get("params") or {}
            if 0 <= idx < len(self.table) and all(
                    trial.params.get(k, v) == v for k, v in params.items()):
                return idx
        if not trial.params:
            return None
        return self.table.find(trial.params)

    # ------------------------------------------------------------------ Optuna API
    def infer_relative_search_space(self, study: Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._fallback.before_trial(study, trial)
        if PLAN_KEY in trial.system_attrs or "fixed_params" in trial.system_attrs:
            return
        index = self.plan(study, trial)
        if index is None:
            return
        params = {k: _jsonable(v) for k, v in self.table.configs[index].items()}
        plan: dict[str, Any] = {"index": int(index), "params": params}
        reason = getattr(self, "last_reason", None)
        if reason:
            plan["reason"] = reason  # why this config: design, model, neighbour (for the record)
        study._storage.set_trial_system_attr(trial._trial_id, PLAN_KEY, plan)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        plan = trial.system_attrs.get(PLAN_KEY)
        if isinstance(plan, dict) and param_name in (plan.get("params") or {}):
            value = plan["params"][param_name]
            try:
                if param_distribution._contains(param_distribution.to_internal_repr(value)):
                    return value
            except (ValueError, TypeError):
                pass
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._fallback.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._fallback.reseed_rng()


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return value


class GridOrderSampler(PlannedSampler):
    """Every config in the order of SGLang's ``bench_speculative.py``, then random.

    ``bench_speculative.py`` loops over server settings (its batch sizes) outermost, then steps,
    top-k and draft tokens, each ascending, with speculation off first. Here the space's
    non-speculative parameters take the batch size's place (in file order, values as listed), then
    speculation off, steps, top-k, draft tokens, then any other speculative parameter.
    """

    def __init__(self, space: SearchSpace, *, seed: int | None = None) -> None:
        super().__init__(space, seed=seed)
        self._order: list[int] | None = None

    @property
    def order(self) -> list[int]:
        """Candidate indices in grid order."""
        if self._order is None:
            t = self.table
            group_cols = [t.coords[:, j] for j in t.group_dims]
            extra_cols = [t.coords[:, j] for j in t.extra_spec_dims]

            def key(i: int) -> tuple:
                return (tuple(int(c[i]) for c in group_cols), bool(t.spec[i]), int(t.steps[i]),
                        int(t.topk[i]), int(t.draft[i]), tuple(int(c[i]) for c in extra_cols), i)

            self._order = sorted(range(len(t)), key=key)
        return self._order

    def plan(self, study: Study, trial: FrozenTrial) -> int | None:
        tried = self.tried(study, trial)
        for i in self.order:
            if not tried[i]:
                return i
        optuna.logging.get_logger(__name__).info("grid exhausted: sampling at random")
        return None
