"""The search's stop rule: stop when no unmeasured config can plausibly beat the incumbent.

A sampler that predicts every config with a spread (:class:`Bounded`, the phase-model sampler)
hands over its :class:`Evidence`: the predicted log tok/s and spread of every config not yet
measured that it expects to run, and the incumbent. :func:`decide` stops when the best upper
confidence bound, ``mu + z * sd``, is no more than the measured noise above the incumbent: no
config left can beat it by more than a reading's own noise. It never stops without evidence:
before the model is fitted, before a baseline and a few speculative configs were measured, or
while any config's prediction is unknown.

The search asks it before each suggestion (:class:`autotune.search.searcher.ConstrainedOptunaSearch`
returns Ray's ``Searcher.FINISHED``), and ``bench_search`` replays it through :func:`check`, the
same function. ``budget.trials`` stays a cap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import TrialState

from autotune.figures import finite, pooled_log_sd

__all__ = ["at_end", "Bounded", "Evidence", "StopDecision", "check", "decide", "does_not_apply",
           "study_noise", "turned_off", "REPEATS_ATTR", "TAG_STOP_RULE", "Z", "MIN_SPECULATIVE"]

#: One-sided bound of a prediction: mu + Z sd (about 97.7% for a normal spread).
Z = 2.0
#: Speculative configs measured (with phase data) before the rule may stop: SGLang's default and
#: two of the design, so the cycle and acceptance fits rest on more than one point.
MIN_SPECULATIVE = 3
#: The search's MLflow tag with the rule's one line (its param ``stop_rule`` is the setting).
TAG_STOP_RULE = "autotune.stop_rule"
#: The Optuna user attr with a trial's tok/s repeats (the search's measured noise).
REPEATS_ATTR = "output_tok_s_repeats"


@dataclass(frozen=True)
class Evidence:
    """What a model-based sampler knows when the search asks whether to go on.

    Attributes:
        mu: Predicted log tok/s of each config not yet measured (nor running) that is expected
            to run; NaN where unknown.
        sd: The spread of each prediction (log scale); inf where unknown.
        incumbent: The best measured feasible log tok/s (baselines included), None if none.
        fitted: Whether the model was fitted from phase data.
        baselines: Baselines measured.
        speculative: Speculative configs measured with phase data.
    """

    mu: np.ndarray
    sd: np.ndarray
    incumbent: float | None
    fitted: bool
    baselines: int
    speculative: int


@runtime_checkable
class Bounded(Protocol):
    """A sampler that can bound every unmeasured config's tok/s."""

    def stop_evidence(self, study: Study) -> Evidence:
        """The sampler's :class:`Evidence` for ``study`` as it stands."""
        ...


@dataclass(frozen=True)
class StopDecision:
    """Whether the search stops now, and one line saying why.

    Attributes:
        stop: Stop before the next trial.
        reason: One line for the console, ``summary.md``, MLflow and the JSON summary.
        applies: Whether the rule ran at all (False: the sampler gives no bound, or it is off).
        upper_gap: The best unmeasured config's upper bound over the incumbent (0.031: 3.1%
            above; negative below), None when unknown or nothing is left unmeasured.
        noise: The relative noise allowed above the incumbent, None when unmeasured.
        trials: Trials run when decided.
        budget: The trial cap.
    """

    stop: bool
    reason: str
    applies: bool = True
    upper_gap: float | None = None
    noise: float | None = None
    trials: int = 0
    budget: int = 0
    off: bool = False

    @property
    def setting(self) -> str:
        """``on``, ``off`` (the space turned it off) or ``not applicable`` (no bound)."""
        return "off" if self.off else "on" if self.applies else "not applicable"

    def record(self) -> dict[str, Any]:
        """The decision as JSON-ready data (the search summary's ``stop_rule``)."""
        return {"setting": self.setting, "stopped": self.stop, "reason": self.reason,
                "upper_gap": self.upper_gap, "noise": self.noise, "trials": self.trials,
                "budget": self.budget}


def _pct(x: float) -> str:
    return f"{abs(x) * 100:.1f}%"


def decide(evidence: Evidence, *, noise: float | None, trials: int, budget: int, z: float = Z,
           min_speculative: int = MIN_SPECULATIVE) -> StopDecision:
    """Stop when every unmeasured config's upper bound is within ``noise`` of the incumbent.

    Args:
        evidence: The sampler's predictions and incumbent.
        noise: The measured relative noise of one reading (standard deviation of ln tok/s);
            None when not measured: then no margin is allowed (the bound must reach below the
            incumbent itself).
        trials: Trials run so far (for the reason).
        budget: The trial cap (for the reason).
        z: Spreads above the mean that count as plausible.
        min_speculative: Speculative configs measured before any stop.

    Raises:
        ValueError: A negative noise, z or count, or mu and sd of different lengths.
    """
    if noise is not None and not noise >= 0:
        raise ValueError(f"noise must be >= 0 or None, got {noise}")
    if z < 0 or min_speculative < 0 or trials < 0 or budget < 0:
        raise ValueError("z, min_speculative, trials and budget must be >= 0")
    mu, sd = np.asarray(evidence.mu, dtype=float), np.asarray(evidence.sd, dtype=float)
    if mu.shape != sd.shape:
        raise ValueError(f"mu and sd differ in shape: {mu.shape} vs {sd.shape}")

    def said(stop: bool, reason: str, gap: float | None = None) -> StopDecision:
        return StopDecision(stop, reason, upper_gap=gap, noise=noise, trials=trials, budget=budget)

    go_on = f"going on after {trials} of {budget} trials: "
    if not evidence.fitted:
        return said(False, go_on + "the model is not fitted yet")
    if evidence.incumbent is None or evidence.baselines < 1:
        return said(False, go_on + "no baseline and no feasible config measured yet")
    if evidence.speculative < min_speculative:
        return said(False, go_on + f"{evidence.speculative} of the {min_speculative} "
                            "speculative configs the rule needs are measured")
    margin = math.log1p(noise) if noise is not None else 0.0
    noise_text = (f"the measured noise {_pct(noise)}" if noise is not None
                  else "no measured noise")
    if mu.size == 0:
        return said(True, f"stopped after {trials} of {budget} trials: every config "
                            "expected to run has been measured")
    upper = mu + z * sd
    if not np.isfinite(upper).all():
        return said(False, go_on + f"{int((~np.isfinite(upper)).sum())} unmeasured "
                            "config(s) have no bound yet")
    best = float(upper.max())
    gap = math.expm1(best - evidence.incumbent)
    if best - evidence.incumbent <= margin:
        where = (f"{_pct(gap)} below the incumbent" if gap <= 0 else
                 f"{_pct(gap)} above the incumbent, within {noise_text}")
        return said(True, f"stopped after {trials} of {budget} trials: the best unmeasured "
                            f"config's upper bound is {where}", gap)
    return said(False, go_on + f"the best unmeasured config's upper bound is {_pct(gap)} "
                        f"above the incumbent, beyond {noise_text}", gap)


def does_not_apply(sampler_name: str, *, trials: int, budget: int) -> StopDecision:
    """The decision of a sampler that gives no bound (tpe, random, grid): run the budget."""
    return StopDecision(False, f"the stop rule does not apply to sampler {sampler_name} (it gives "
                        f"no bound): {trials} of {budget} trials run", applies=False,
                        trials=trials, budget=budget)


def turned_off(*, trials: int, budget: int) -> StopDecision:
    """The decision of a space that turned the rule off (``search.stop_rule: false``)."""
    return StopDecision(False, f"the stop rule is off (search.stop_rule: false): {trials} of "
                        f"{budget} trials run", applies=False, trials=trials, budget=budget, off=True)


def at_end(decision: StopDecision, *, trials: int, budget: int) -> StopDecision:
    """The rule's last decision, worded for the search's end (``trials`` ended of ``budget``):
    a stop stands as it was said (with the trials that were already running then and ended after
    it, so the line agrees with the table's rows); otherwise the search ran to its cap, and the
    line says so."""
    if decision.stop:
        head = f"stopped after {decision.trials} of {decision.budget} trials"
        if trials <= decision.trials or not decision.reason.startswith(head):
            return decision
        more = trials - decision.trials
        return replace(decision, reason=f"{head} ({more} more, running then, ended after it: {trials} in all)"
                       + decision.reason[len(head):])
    if not decision.applies:
        head = decision.reason.rsplit(":", 1)[0]
        return replace(decision, reason=f"{head}: {trials} of {budget} trials run", trials=trials,
                       budget=budget)
    why = decision.reason.split(": ", 1)[-1]
    return replace(decision, reason=f"ran {trials} of {budget} trials, the rule never stopped; "
                   f"last: {why}", trials=trials, budget=budget)


def check(sampler: BaseSampler, study: Study, *, sampler_name: str, noise: float | None, trials: int,
          budget: int) -> StopDecision:
    """The stop decision for a study run by ``sampler``: :func:`decide` on its evidence, or
    :func:`does_not_apply` when it gives no bound. The search and ``bench_search`` both call this."""
    if not isinstance(sampler, Bounded):
        return does_not_apply(sampler_name, trials=trials, budget=budget)
    return decide(sampler.stop_evidence(study), noise=noise, trials=trials, budget=budget)


def study_noise(study: Study) -> float | None:
    """The measured noise of one reading: the pooled within-trial standard deviation of ln tok/s
    over the repeats the finished trials report (user attr ``output_tok_s_repeats``), None when
    no trial has two repeats."""
    groups: list[Sequence[float]] = []
    for t in study.get_trials(deepcopy=False):
        if t.state != TrialState.COMPLETE:
            continue
        reps = t.user_attrs.get(REPEATS_ATTR)
        if isinstance(reps, list):
            values = _positive(reps)
            if len(values) >= 2:
                groups.append(values)
    if not groups:
        return None
    sd, _, _ = pooled_log_sd(groups)
    return sd


def _positive(values: Iterable[Any]) -> list[float]:
    out = []
    for v in values:
        x = finite(v)
        if x is not None and x > 0:
            out.append(x)
    return out
