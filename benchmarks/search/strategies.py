"""The sampler benchmark itself: each strategy run through an Optuna study against the oracle, summarised.

:func:`benchmark` runs every strategy (:data:`STRATEGIES`) for a number of seeds on one problem
(:mod:`benchmarks.search.problem`) and summarises trials-to-target per strategy, the
phase model's median set against its peers' (:func:`best_peer`). How trials are counted and
when a run succeeds is said in :mod:`benchmarks.search.command`, the command that
prints it; kept apart from it so that tests and other tools call the benchmark without the CLI.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.samplers import BaseSampler

from autotune.search.samplers import SAMPLER_NAMES, make_sampler
from autotune.search.samplers._observations import PLAN_KEY
from autotune.space.search_space import SearchSpace
from autotune.trial.gpu_time import count
from benchmarks.search.gpu_model import sweep_events
from benchmarks.search.noise import measured_noise
from benchmarks.search.peers import AutoTier1Sampler, AutoTier2Sampler
from benchmarks.search.problem import Oracle, Problem, load_problem
from benchmarks.search.problem import runs as ran  # "runs" names run lists here

#: The noise the emulator rows used before one was measured; ``--noise 0.02`` is its stress check.
STRESS_NOISE_CV = 0.02

OURS = "phase-model"
AUTO_TIERS = ("auto-tier1", "auto-tier2")
STRATEGIES = ("grid", "random", "tpe", *AUTO_TIERS, OURS)
#: ``benchmark(finalists=...)``: the space's own ``max(1, search.finalists)``, as the search takes.
FINALISTS_OF_SPACE = "space"
#: The strategies the phase model's median is set against (issue 15: at least 2x fewer trials).
PEERS = ("random", "tpe", *AUTO_TIERS)
#: The peers' strategies the benchmark builds itself: a space file cannot name them (they are not
#: product samplers), so ``make_sampler`` does not know them.
PEER_SAMPLERS = {"auto-tier1": AutoTier1Sampler, "auto-tier2": AutoTier2Sampler}


@dataclass
class RunResult:
    """One strategy, one seed."""

    trials_to_target: int | None
    trials: int
    baselines: int
    failed: int
    duplicates: int
    seconds: float
    reached_by: str | None = None  # the plan reason of the trial that reached the target
    conclusion_runs: int | None = None  # finalist runs in trials_to_target (None: not counted)
    gpu_s_to_target: float | None = None  # GPU-seconds of every server up to then (None: not reached)


def make_strategy(name: str, *, seed: int | None, space: SearchSpace) -> BaseSampler:
    """The sampler of a strategy: a peer's (:data:`PEER_SAMPLERS`) or a product one (``make_sampler``)."""
    peer = PEER_SAMPLERS.get(name)
    return peer(space, seed=seed) if peer is not None else make_sampler(name, seed=seed, space=space)


def run_strategy(problem: Problem, strategy: str, *, seed: int, budget: int, noise_cv: float,
                 phase_data: bool = True, warm_start: bool = True,
                 finalists: int | None = None) -> RunResult:
    """Run one strategy through an Optuna study until it reaches the target or the budget.

    With ``warm_start`` the study's first trial is SGLang's default speculative config where the
    space can run it (``problem.warm_start``), as every search does. With ``finalists`` a run
    succeeds when the search, concluded after that trial with that many finalists, names a config
    at the target; the conclusion's runs count within the budget
    (:mod:`benchmarks.search.conclusion`).
    """
    import optuna

    t0 = time.perf_counter()
    sampler = make_strategy(strategy, seed=seed, space=problem.space)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    warm = problem.warm_start if warm_start else None
    if warm is not None and warm.asked:
        study.enqueue_trial(warm.asked)
    oracle = Oracle(problem, seed=seed, noise_cv=noise_cv, phase_data=phase_data,
                    finalists=finalists)
    reached_by = None
    while oracle.trials < budget and oracle.success_at is None:
        trial = study.ask()
        params = problem.space.suggest(trial)
        oracle.run(params).tell(study, trial, maximize=True)  # as the search's searcher tells it
        if oracle.success_at is not None:
            plan = study._storage.get_trial_system_attrs(trial._trial_id).get(PLAN_KEY)
            reached_by = plan.get("reason") if isinstance(plan, dict) else None
    hit = oracle.success_at if oracle.success_at is not None and oracle.success_at <= budget \
        else None
    return RunResult(trials_to_target=hit, trials=oracle.trials, baselines=oracle.baselines,
                     failed=oracle.failed, duplicates=oracle.duplicates,
                     seconds=time.perf_counter() - t0,
                     reached_by=reached_by if hit is not None else None,
                     conclusion_runs=oracle.conclusion_runs if hit is not None else None,
                     gpu_s_to_target=(oracle.gpu_at_success.gpu_s
                                      if hit is not None and oracle.gpu_at_success is not None else None))


def grid_full(problem: Problem, *, seed: int, noise_cv: float,
              finalists: int | None = None) -> int | None:
    """Trials the grid needs with no budget (it runs through the whole space at most)."""
    from autotune.search.samplers import GridOrderSampler

    grid = GridOrderSampler(problem.space, seed=seed)
    oracle = Oracle(problem, seed=seed, noise_cv=noise_cv, phase_data=False, finalists=finalists)
    for i in grid.order:
        oracle.run(grid.table.configs[i])
        if oracle.success_at is not None:
            return oracle.success_at
    return None


def _warm_start_truth(problem: Problem) -> dict[str, Any]:
    """SGLang's default speculative config on the truth: its tok/s, share of the optimum, verdict."""
    warm = problem.warm_start
    if warm.params is None:
        return {"describe": warm.describe(), "tok_s": None, "of_optimum": None, "reaches_target": None}
    truth = problem.truth(warm.params)
    tok = truth.get("output_tok_s") if ran(truth) else None
    feasible = problem.truly_feasible(warm.params)
    return {"describe": warm.describe(), "params": warm.params, "tok_s": tok, "feasible": feasible,
            "of_optimum": (tok / problem.optimum) if tok is not None else None,
            "reaches_target": bool(feasible and tok is not None and tok >= problem.target)}


def _quantile(values: Sequence[float | None], q: float) -> float | None:
    """Quantile with unreached runs as +inf; None when it falls on an unreached run."""
    xs = sorted(math.inf if v is None else float(v) for v in values)
    if not xs:
        return None
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if math.isinf(xs[hi]):
        return None
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(runs: Sequence[RunResult], *, budget: int) -> dict[str, Any]:
    """Median and p90 trials to target, success rate and run costs of one strategy."""
    hits = [r.trials_to_target for r in runs]
    return {
        "trials_to_target": hits,
        "median": _quantile(hits, 0.5),
        "p90": _quantile(hits, 0.9),
        "success_rate": sum(h is not None for h in hits) / len(hits) if hits else None,
        "budget": budget,
        "mean_trials_run": float(np.mean([r.trials for r in runs])),
        "mean_baselines": float(np.mean([r.baselines for r in runs])),
        "mean_failed": float(np.mean([r.failed for r in runs])),
        "mean_duplicates": float(np.mean([r.duplicates for r in runs])),
        "seconds": float(sum(r.seconds for r in runs)),
        "reached_by": dict(Counter(r.reached_by or "-" for r in runs
                                   if r.trials_to_target is not None)),
        # Of trials_to_target, the runs of the conclusion that named the winner (finalists).
        "conclusion_runs": [r.conclusion_runs for r in runs],
        "mean_conclusion_runs": (float(np.mean(spent)) if (spent := [
            r.conclusion_runs for r in runs if r.conclusion_runs is not None]) else None),
        # GPU-seconds to the target (a confirmed winner with finalists), an unreached run as +inf.
        "gpu_s_to_target": [r.gpu_s_to_target for r in runs],
        "gpu_s_median": _quantile([r.gpu_s_to_target for r in runs], 0.5),
        "gpu_s_p10": _quantile([r.gpu_s_to_target for r in runs], 0.1),
        "gpu_s_p90": _quantile([r.gpu_s_to_target for r in runs], 0.9),
    }


def benchmark(space_path: str | None = None, *, profile: str | None = None, seeds: int = 20,
              budget: int = 60, noise_cv: float | None = None, threshold: float = 0.98,
              strategies: Sequence[str] = STRATEGIES, phase_data: bool = True,
              first_seed: int = 0, landscape: str | None = None,
              warm_start: bool = True,
              finalists: int | str | None = None) -> dict[str, Any]:
    """Run every strategy on ``seeds`` seeds; one summary per strategy, keyed by name.

    Args:
        space_path: The space (with ``landscape``: an override of the landscape's own space).
        profile: Emulator profile override (not with ``landscape``).
        seeds: Runs per strategy.
        budget: Trials per run.
        noise_cv: The emulator's tok/s noise CV. Default: measured from the recorded real
            landscapes (:func:`benchmarks.search.noise.measured_noise`); the result's
            ``noise_source`` says which. A landscape's noise is its recorded repeats: giving
            ``noise_cv`` with ``landscape`` is a ValueError.
        threshold: Fraction of the optimum that counts as reached.
        strategies: Which strategies to run.
        phase_data: Whether trials report phases and accept data.
        first_seed: First seed of the range.
        landscape: A recorded landscape file to replay instead of the emulator.
        warm_start: Every strategy's first trial is SGLang's default speculative config, as in a
            search; the result's ``warm_start`` says how good that config alone is.
        finalists: None (the default, issue 15's count): each run is judged by its best
            measured feasible config after each trial, and nothing is added. A number N >= 1, or
            ``"space"`` for the space's own ``max(1, search.finalists)``: each run is judged by
            what the search, stopped after the trial, would name after re-measuring N finalists
            beside fresh baselines, and the count adds their runs (two a finalist;
            :mod:`benchmarks.search.conclusion`).

    Raises:
        ValueError: Bad counts, noise, strategies, or ``finalists`` neither ``"space"`` nor a
            whole number >= 1.
    """
    if seeds < 1 or budget < 1:
        raise ValueError("seeds and budget must be >= 1")
    if landscape is not None and noise_cv is not None:
        raise ValueError("--noise does not apply to a recorded landscape: its noise is drawn from "
                         "each config's recorded repeats")
    if landscape is not None:
        noise_cv, source = 0.0, {"kind": "landscape",
                                 "describe": "each measurement is one of the config's recorded repeats"}
    elif noise_cv is None:
        measured = measured_noise()
        noise_cv, source = measured.cv, {**measured.source(), "describe": measured.describe()}
    else:
        source = {"kind": "given", "describe": f"noise cv {noise_cv:g} (given: --noise)"}
    if noise_cv < 0:
        raise ValueError(f"noise must be >= 0, got {noise_cv}")
    known = (*SAMPLER_NAMES, *PEER_SAMPLERS)
    unknown = [s for s in strategies if s not in known]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {', '.join(known)}")
    if finalists is not None and finalists != FINALISTS_OF_SPACE and (
            isinstance(finalists, bool) or not isinstance(finalists, int) or finalists < 1):
        raise ValueError(f"finalists must be {FINALISTS_OF_SPACE!r} or a whole number >= 1 "
                         f"(None: no conclusion), got {finalists!r}")
    problem = load_problem(space_path, profile=profile, threshold=threshold, landscape=landscape)
    if isinstance(finalists, str):  # FINALISTS_OF_SPACE, the one text the check above lets by
        finalists = max(1, problem.space.search.finalists)
    seed_list = range(first_seed, first_seed + seeds)
    out: dict[str, Any] = {}
    for name in strategies:
        runs = [run_strategy(problem, name, seed=s, budget=budget, noise_cv=noise_cv,
                             phase_data=phase_data, warm_start=warm_start, finalists=finalists)
                for s in seed_list]
        out[name] = summarize(runs, budget=budget)
    info = problem.evaluator.info()
    sweep = count(sweep_events(problem))
    common = {"space": space_path if landscape is None else info["space"],
              "profile": info.get("profile"), **info,
              "configs": len(problem.configs), "groups": problem.groups,
              "optimum_tok_s": problem.optimum, "optimum_params": problem.optimum_params,
              "target_tok_s": problem.target,
              "noise_cv": None if landscape is not None else noise_cv,
              "noise_source": source, "seeds": seeds,
              "finalists": finalists,
              "warm_start": _warm_start_truth(problem) if warm_start else None,
              # The exhaustive sweep: every config and each group's baseline measured once.
              "sweep_gpu_s": sweep.gpu_s, "sweep_servers": sum(sweep.servers.values())}
    if "grid" in out:
        full = [grid_full(problem, seed=s, noise_cv=noise_cv, finalists=finalists)
                for s in seed_list]
        out["grid"]["grid_size"] = len(problem.configs)
        out["grid"]["unbudgeted_trials_to_target"] = full
        out["grid"]["unbudgeted_median"] = _quantile(full, 0.5)
    ours = out.get(OURS, {}).get("median")
    for summary in out.values():
        summary.update(common)
        theirs = summary["median"]
        summary["ratio_ours_to_this"] = (ours / theirs) if ours and theirs else None
        summary["times_fewer_with_ours"] = (theirs / ours) if ours and theirs else None
        gpu = summary["gpu_s_median"]
        summary["gpu_s_median_of_sweep"] = gpu / sweep.gpu_s if gpu is not None and sweep.gpu_s else None
    if "grid" in out and ours:
        out["grid"]["grid_size_over_ours"] = len(problem.configs) / ours
    if OURS in out:
        out[OURS].update(best_peer(out, budget=budget))
    return out


def best_peer(out: Mapping[str, Mapping[str, Any]], *, budget: int) -> dict[str, Any]:
    """The phase model against the best median of the peers that ran (:data:`PEERS`).

    Returns ``best_peer`` (its name, None when no peer ran or none has a median within the
    budget), ``best_peer_median``, ``peers`` (those that ran) and ``times_fewer_than_best_peer``
    (its median over ours). When peers ran but none has a median (each missed the target in more
    than half of the runs), their medians exceed the budget: ``times_fewer_than_best_peer`` is
    None and ``times_fewer_than_best_peer_above`` gives the bound, budget / our median.
    """
    ours = out[OURS]["median"]
    peers = [p for p in PEERS if p in out]
    reached = [p for p in peers if out[p]["median"] is not None]
    best = min(reached, key=lambda p: (out[p]["median"], peers.index(p))) if reached else None
    theirs = out[best]["median"] if best else None
    return {"peers": peers, "best_peer": best, "best_peer_median": theirs,
            "times_fewer_than_best_peer": theirs / ours if ours and theirs else None,
            "times_fewer_than_best_peer_above": (budget / ours if ours and peers and not reached
                                                 else None)}
