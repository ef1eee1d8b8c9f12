"""The search's stop rule replayed: does stopping early cost success, and how many trials does it save?

``python -m benchmarks.search --stop-rule ...`` runs a strategy (the phase model by default) the
way :func:`benchmarks.search.strategies.run_strategy` does, but asks
:func:`autotune.search.stopping.check` (the function the search's searcher asks) before every
trial, with the noise the benchmark measures with (:func:`rule_noise`). Each seed is one run to the
full budget: the first trial before which the rule stops is recorded with the pick at that point,
and the run goes on to the budget for the "full budget" row, so both rows see the same noise and
the same proposals (asking the rule changes nothing the sampler does).

A row succeeds when its final pick (the best measured feasible config, mean of its measurements;
no finalists) has a true tok/s of at least the threshold of the optimum. Trials count as
``bench_search`` counts them: a new group's baseline is one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.figures import pooled_log_sd
from autotune.search.stopping import check
from benchmarks.search.conclusion import conclude
from benchmarks.search.problem import Oracle, Problem, replay_problem

__all__ = ["StopRun", "rule_noise", "run_with_stop_rule", "stop_rule_benchmark", "render_stop_rule"]


@dataclass(frozen=True)
class StopRun:
    """One seed: where the rule stopped and whether each row's pick reached the target."""

    stopped_at: int | None  # trials run when the rule stopped; None: it never did
    stop_reason: str  # the rule's last line
    stopped_success: bool  # the pick when the rule stopped (at the budget if it never did)
    full_trials: int
    full_success: bool  # the pick after the full budget


def rule_noise(problem: Problem, noise_cv: float) -> float | None:
    """The noise the rule is given: what a search would measure from its trials' repeats. On the
    emulator the CV its draws use; on a landscape the pooled spread of its recorded repeats (None
    when no config has two)."""
    land = getattr(problem.evaluator, "landscape", None)
    if land is None:
        return noise_cv
    groups = [list(e.repeats) for e in land.entries.values() if len(e.repeats) >= 2]
    if not groups:
        return None
    return pooled_log_sd(groups)[0]


def _judge(oracle: Oracle, finalists: int | None) -> tuple[bool, int]:
    """Whether the search, ending here, names a config at the target, and the runs it spent: the
    pick alone (``finalists`` None), or the conclusion the search runs (that many finalists)."""
    if finalists is None:
        return oracle.pick_reaches(), oracle.trials
    end = conclude(oracle, finalists=finalists)
    ok = end.winner is not None and oracle.true_of(end.winner) >= oracle.p.target
    return ok, oracle.trials + end.runs


def run_with_stop_rule(problem: Problem, strategy: str, *, seed: int, budget: int,
                       noise_cv: float, rule_noise_cv: float | None, warm_start: bool = True,
                       finalists: int | None = None) -> StopRun:
    """One run to the budget, the stop rule asked before every trial (see the module's text);
    with ``finalists``, each row ends with the search's conclusion and counts its runs."""
    import optuna

    from benchmarks.search.strategies import make_strategy

    sampler = make_strategy(strategy, seed=seed, space=problem.space)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    warm = problem.warm_start if warm_start else None
    if warm is not None and warm.asked:
        study.enqueue_trial(warm.asked)
    oracle = Oracle(problem, seed=seed, noise_cv=noise_cv)
    stopped_at: int | None = None
    stopped_success = False
    reason = ""
    while oracle.trials < budget:
        if stopped_at is None:
            decision = check(sampler, study, sampler_name=strategy, noise=rule_noise_cv,
                             trials=oracle.trials, budget=budget)
            reason = decision.reason
            if decision.stop:
                stopped_success, stopped_at = _judge(oracle, finalists)
        trial = study.ask()
        params = problem.space.suggest(trial)
        oracle.run(params).tell(study, trial, maximize=True)
    full, full_runs = _judge(oracle, finalists)
    if stopped_at is None:
        stopped_success = full
    return StopRun(stopped_at=stopped_at, stop_reason=reason, stopped_success=stopped_success,
                   full_trials=full_runs, full_success=full)


def _spread(values: Sequence[int]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p10": None, "p90": None, "min": None, "max": None}
    xs = np.asarray(values, dtype=float)
    return {"median": float(np.median(xs)), "p10": float(np.quantile(xs, 0.1)),
            "p90": float(np.quantile(xs, 0.9)), "min": float(xs.min()), "max": float(xs.max())}


def stop_rule_benchmark(space_path: str | None = None, *, landscape: str | None = None,
                        profile: str | None = None, strategy: str = "phase-model", seeds: int = 20,
                        first_seed: int = 0, budget: int = 60, noise_cv: float | None = None,
                        threshold: float = 0.98,
                        finalists: int | str | None = None) -> dict[str, Any]:
    """The stop rule against the full budget, ``seeds`` runs of one strategy.

    Raises:
        ValueError: Bad counts, or ``noise_cv`` with a landscape.
    """
    if seeds < 1 or budget < 1:
        raise ValueError("seeds and budget must be >= 1")
    problem, draw_cv = replay_problem(space_path, profile=profile, threshold=threshold, landscape=landscape,
                                      noise_cv=noise_cv)
    given = rule_noise(problem, draw_cv)
    if finalists == "space":
        finalists = max(1, problem.space.search.finalists)
    if isinstance(finalists, str) or (finalists is not None and finalists < 1):
        raise ValueError(f"finalists must be 'space' or a whole number >= 1, got {finalists!r}")
    runs = [run_with_stop_rule(problem, strategy, seed=s, budget=budget, noise_cv=draw_cv,
                               rule_noise_cv=given, finalists=finalists)
            for s in range(first_seed, first_seed + seeds)]
    used = [r.stopped_at if r.stopped_at is not None else r.full_trials for r in runs]
    return {
        "source": landscape or space_path, "strategy": strategy, "seeds": seeds, "budget": budget,
        "threshold": threshold, "first_seed": first_seed, "finalists": finalists,
        "configs": len(problem.configs), "rule_noise": given,
        "stop_rule": {"success_rate": sum(r.stopped_success for r in runs) / len(runs),
                      "trials": used, **_spread(used),
                      "stopped": sum(r.stopped_at is not None for r in runs)},
        "full_budget": {"success_rate": sum(r.full_success for r in runs) / len(runs),
                        "trials": [r.full_trials for r in runs],
                        **_spread([r.full_trials for r in runs])},
        "reasons": [r.stop_reason for r in runs],
    }


def _n(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:g}"


def render_stop_rule(result: Mapping[str, Any]) -> str:
    """The two rows (stop rule, full budget) as plain text."""
    noise = result["rule_noise"]
    lines = [f"stop rule: {result['source']}  {result['configs']} configs  {result['strategy']}  "
             f"seeds {result['seeds']}  budget {result['budget']}  noise given to the rule "
             + ("none measured" if noise is None else f"{noise:.5f}"),
             f"success: the named config's true tok/s >= {result['threshold']:.0%} of the optimum; "
             + ("named: the best measured feasible config, no finalists" if result["finalists"] is None
                else f"named by the search's conclusion, {result['finalists']} finalist(s) re-measured "
                     "beside fresh baselines (2 runs each, counted in the trials)"), "",
             f"{'row':<12} {'success':>8} {'trials median':>14} {'p10-p90':>10} {'min-max':>9} "
             f"{'stopped':>8}"]
    for name, key in (("stop rule", "stop_rule"), ("full budget", "full_budget")):
        row = result[key]
        stopped = f"{row['stopped']}/{result['seeds']}" if "stopped" in row else "-"
        lines.append(f"{name:<12} {row['success_rate']:>8.0%} {_n(row['median']):>14} "
                     f"{_n(row['p10']) + '-' + _n(row['p90']):>10} "
                     f"{_n(row['min']) + '-' + _n(row['max']):>9} {stopped:>8}")
    if result["reasons"]:
        lines += ["", f"seed {result['first_seed']}: {result['reasons'][0]}"]
    return "\n".join(lines)
