"""How many trials each search strategy needs to get within 2% of the best config.

``python -m autotune.bench_search --space S [--profile P] --seeds 20 --budget B [--noise CV]
[--json]`` runs, on the model-only evaluator (:mod:`autotune.sim.evaluate`) with measurement noise,
and ``python -m autotune.bench_search --landscape FILE [--space S] ...`` on a recorded landscape
(:mod:`autotune.search.benchmark.landscape`: real measurements of every config, replayed, the noise drawn from each
config's recorded repeats):

- ``grid``: every config in the order of SGLang's ``bench_speculative.py``;
- ``random``: Optuna's random sampler;
- ``tpe``: Optuna's TPE with its defaults (10 random start-up trials);
- ``auto-tier1``, ``auto-tier2``: SGLang ``auto_benchmark``'s tier 1 and tier 2 searches
  (:mod:`autotune.search.samplers._peers`), then random;
- ``phase-model``: :class:`autotune.search.samplers.PhaseModelSampler`.

The report ends with the phase model's median against the best median of the peers (random, TPE
and the auto_benchmark tiers), and for the tiers how many runs reached the target inside the
tier's own plan rather than in the random tail after it.

Each strategy runs through a real Optuna study and the space's own define-by-run
(``SearchSpace.suggest``), one trial at a time. A trial gets back what a real trial reports: the
noisy measured tok/s as the objective, the constraints (``failed``, ``break_even``) through
``trial.set_constraint``, and the user attrs of ``docs/samplers.md`` (phase profile, accept length,
accepted-drafts histogram, the group's baseline).

How trials are counted: as autotune's trainable does, the first trial of a new non-speculative
group measures that group's baseline first. That baseline run counts as one trial, for every
strategy alike, and is a candidate winner (when no speculative config beats the baseline, the
baseline is the answer). Failed and infeasible configs count as trials and are never picked. A
re-proposed config is measured (and counted) again.

After every trial the strategy's pick is its best measured feasible config (mean of its
measurements); the run succeeds at the first trial where the pick's true tok/s (noise-free, or
the recorded median) is at least ``--threshold`` (0.98) of the true optimum: the best feasible
config of the space, baselines included. Noise is common across strategies: the n-th measurement
of a config in seed s gets the same noise whichever strategy asks for it. The truth, the noise and
the oracle live in :mod:`autotune.search.benchmark.problem`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune import cli
from autotune.search.benchmark.problem import (EmulatorTruth, Measured, Oracle, Problem, load_problem,
                                     noise_rng)
from autotune.search.benchmark.problem import runs as ran  # "runs" names run lists here
from autotune.errors import AutotuneError
from autotune.search.samplers import SAMPLER_NAMES, make_sampler
from autotune.search.samplers._observations import PLAN_KEY

__all__ = ["AUTO_TIERS", "EmulatorTruth", "Measured", "OURS", "Oracle", "PEERS", "Problem",
           "RunResult", "STRATEGIES", "benchmark", "grid_full", "load_problem", "main", "noise_rng",
           "render", "run_strategy", "summarize"]

DEFAULT_NOISE_CV = 0.02

OURS = "phase-model"
AUTO_TIERS = ("auto-tier1", "auto-tier2")
STRATEGIES = ("grid", "random", "tpe", *AUTO_TIERS, OURS)
#: The strategies the phase model's median is set against (issue 15: at least 2x fewer trials).
PEERS = ("random", "tpe", *AUTO_TIERS)


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


def run_strategy(problem: Problem, strategy: str, *, seed: int, budget: int, noise_cv: float,
                 phase_data: bool = True, warm_start: bool = True) -> RunResult:
    """Run one strategy through an Optuna study until it reaches the target or the budget.

    With ``warm_start`` the study's first trial is SGLang's default speculative config where the
    space can run it (``problem.warm_start``), as every search does.
    """
    import optuna

    t0 = time.perf_counter()
    sampler = make_sampler(strategy, seed=seed, space=problem.space)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    warm = problem.warm_start if warm_start else None
    if warm is not None and warm.asked:
        study.enqueue_trial(warm.asked)
    oracle = Oracle(problem, seed=seed, noise_cv=noise_cv, phase_data=phase_data)
    reached_by = None
    while oracle.trials < budget and oracle.success_at is None:
        trial = study.ask()
        params = problem.space.suggest(trial)
        measured = oracle.run(params)
        for k, v in measured.attrs.items():
            trial.set_user_attr(k, v)
        for k, v in measured.constraints.items():
            trial.set_constraint(k, v)
        study.tell(trial, measured.value)
        if oracle.success_at is not None:
            plan = study._storage.get_trial_system_attrs(trial._trial_id).get(PLAN_KEY)
            reached_by = plan.get("reason") if isinstance(plan, dict) else None
    hit = oracle.success_at if oracle.success_at is not None and oracle.success_at <= budget \
        else None
    return RunResult(trials_to_target=hit, trials=oracle.trials, baselines=oracle.baselines,
                     failed=oracle.failed, duplicates=oracle.duplicates,
                     seconds=time.perf_counter() - t0,
                     reached_by=reached_by if hit is not None else None)


def grid_full(problem: Problem, *, seed: int, noise_cv: float) -> int | None:
    """Trials the grid needs with no budget (it runs through the whole space at most)."""
    from autotune.search.samplers import GridOrderSampler

    grid = GridOrderSampler(problem.space, seed=seed)
    oracle = Oracle(problem, seed=seed, noise_cv=noise_cv, phase_data=False)
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


def _quantile(values: Sequence[int | None], q: float) -> float | None:
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
    }


def benchmark(space_path: str | None = None, *, profile: str | None = None, seeds: int = 20,
              budget: int = 60, noise_cv: float | None = None, threshold: float = 0.98,
              strategies: Sequence[str] = STRATEGIES, phase_data: bool = True,
              first_seed: int = 0, landscape: str | None = None,
              warm_start: bool = True) -> dict[str, Any]:
    """Run every strategy on ``seeds`` seeds; one summary per strategy, keyed by name.

    Args:
        space_path: The space (with ``landscape``: an override of the landscape's own space).
        profile: Emulator profile override (not with ``landscape``).
        seeds: Runs per strategy.
        budget: Trials per run.
        noise_cv: The emulator's tok/s noise CV (default 0.02). A landscape's noise is its
            recorded repeats: giving ``noise_cv`` with ``landscape`` is a ValueError.
        threshold: Fraction of the optimum that counts as reached.
        strategies: Which strategies to run.
        phase_data: Whether trials report phases and accept data.
        first_seed: First seed of the range.
        landscape: A recorded landscape file to replay instead of the emulator.
        warm_start: Every strategy's first trial is SGLang's default speculative config, as in a
            search; the result's ``warm_start`` says how good that config alone is.
    """
    if seeds < 1 or budget < 1:
        raise ValueError("seeds and budget must be >= 1")
    if landscape is not None and noise_cv is not None:
        raise ValueError("--noise does not apply to a recorded landscape: its noise is drawn from "
                         "each config's recorded repeats")
    if noise_cv is None:
        noise_cv = 0.0 if landscape is not None else DEFAULT_NOISE_CV
    if noise_cv < 0:
        raise ValueError(f"noise must be >= 0, got {noise_cv}")
    unknown = [s for s in strategies if s not in SAMPLER_NAMES]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {', '.join(SAMPLER_NAMES)}")
    problem = load_problem(space_path, profile=profile, threshold=threshold, landscape=landscape)
    seed_list = range(first_seed, first_seed + seeds)
    out: dict[str, Any] = {}
    for name in strategies:
        runs = [run_strategy(problem, name, seed=s, budget=budget, noise_cv=noise_cv,
                             phase_data=phase_data, warm_start=warm_start) for s in seed_list]
        out[name] = summarize(runs, budget=budget)
    info = problem.evaluator.info()
    common = {"space": space_path if landscape is None else info["space"],
              "profile": info.get("profile"), **info,
              "configs": len(problem.configs), "groups": problem.groups,
              "optimum_tok_s": problem.optimum, "optimum_params": problem.optimum_params,
              "target_tok_s": problem.target,
              "noise_cv": None if landscape is not None else noise_cv, "seeds": seeds,
              "warm_start": _warm_start_truth(problem) if warm_start else None}
    if "grid" in out:
        full = [grid_full(problem, seed=s, noise_cv=noise_cv) for s in seed_list]
        out["grid"]["grid_size"] = len(problem.configs)
        out["grid"]["unbudgeted_trials_to_target"] = full
        out["grid"]["unbudgeted_median"] = _quantile(full, 0.5)
    ours = out.get(OURS, {}).get("median")
    for name, summary in out.items():
        summary.update(common)
        theirs = summary["median"]
        summary["ratio_ours_to_this"] = (ours / theirs) if ours and theirs else None
        summary["times_fewer_with_ours"] = (theirs / ours) if ours and theirs else None
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


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _warm_line(warm: Mapping[str, Any] | None) -> str:
    if warm is None:
        return "warm start: off (--no-warm-start)"
    if warm.get("params") is None:
        return f"warm start: {warm['describe']}"
    if warm.get("tok_s") is None:
        return f"warm start (every strategy's first trial): {warm['describe'].replace(', measured first', '')}: it fails here"
    verdict = "reaches the target" if warm["reaches_target"] else (
        "below the target" if warm["feasible"] else "infeasible (does not beat its baseline)")
    return (f"warm start (every strategy's first trial): {warm['describe'].replace(', measured first', '')}: "
            f"{warm['tok_s']:.2f} tok/s, {warm['of_optimum']:.1%} of the optimum, {verdict}")


def render(result: Mapping[str, Any]) -> str:
    """Plain-text table of a :func:`benchmark` result."""
    any_summary = next(iter(result.values()))
    a = any_summary
    if a.get("oracle") == "landscape":
        lines = [(f"oracle: recorded landscape {a['landscape']} ({a['records']} records"
                  + (f"; acceptance {a['acceptance']}" if a.get("acceptance") else "") + ")"
                  + (f": {a['description']}" if a.get("description") else "")),
                 ("noise: each measurement is one of the config's recorded repeats; the "
                  "phase-model sampler's fitted model is not the oracle here"),
                 (f"space {a['space']}  {a['configs']} configs in {a['groups']} groups  "
                  f"seeds {a['seeds']}")]
    else:
        lines = [(f"space {a['space']}  profile {a['profile']}  {a['configs']} configs in "
                  f"{a['groups']} groups  noise cv {a['noise_cv']}  seeds {a['seeds']}")]
    lines += [(f"optimum {a['optimum_tok_s']:.2f} tok/s  target (>= "
               f"{a['target_tok_s'] / a['optimum_tok_s']:.0%}) {a['target_tok_s']:.2f}  at "
               f"{a['optimum_params']}"),
              _warm_line(a.get("warm_start")),
              "",
              (f"{'strategy':<12} {'median':>7} {'p90':>7} {'success':>8} {'ours/this':>10} "
               f"{'x fewer':>8} {'baselines':>9} {'failed':>7} {'dups':>5} {'secs':>6}")]
    for name, s in result.items():
        lines.append(f"{name:<12} {_fmt(s['median']):>7} {_fmt(s['p90']):>7} "
                     f"{s['success_rate']:>8.0%} {_fmt(s['ratio_ours_to_this'], 2):>10} "
                     f"{_fmt(s['times_fewer_with_ours'], 1):>8} {s['mean_baselines']:>9.1f} "
                     f"{s['mean_failed']:>7.1f} {s['mean_duplicates']:>5.1f} {s['seconds']:>6.1f}")
    grid = result.get("grid")
    if grid:
        lines.append("")
        lines.append(f"grid size {grid['grid_size']}; without a budget the grid reaches the target "
                     f"after a median of {_fmt(grid['unbudgeted_median'])} trials"
                     + (f"; grid size / our median = {grid['grid_size_over_ours']:.1f}x"
                        if grid.get("grid_size_over_ours") else ""))
    if not grid and (any(n in result for n in AUTO_TIERS) or OURS in result):
        lines.append("")
    for name in AUTO_TIERS:
        s = result.get(name)
        if s:
            by = s.get("reached_by") or {}
            inside = by.get("base", 0) + by.get("speculative", 0)
            lines.append(f"{name}: reached the target inside its own plan in {inside} of "
                         f"{len(s['trials_to_target'])} runs (base stage {by.get('base', 0)}, "
                         f"speculative stage {by.get('speculative', 0)}), in the random tail "
                         f"after it in {by.get('random', 0)}")
    ours = result.get(OURS)
    if ours and ours.get("peers"):
        peers = ", ".join(ours["peers"])
        if ours.get("best_peer"):
            ratio = ours["times_fewer_than_best_peer"]
            lines.append(f"{OURS} against the best of {peers}: {ours['best_peer']} (median "
                         f"{_fmt(ours['best_peer_median'])}) / ours ({_fmt(ours['median'])}) = "
                         + ("-" if not ratio else f"{ratio:.2f}x fewer trials" if ratio >= 1
                            else f"{1 / ratio:.2f}x more trials (ours is behind)"))
        else:
            above = ours.get("times_fewer_than_best_peer_above")
            lines.append(f"{OURS} against the best of {peers}: none has a median within the "
                         f"budget of {ours['budget']}"
                         + (f", so > {above:.2f}x fewer trials" if above else ""))
    lines.append("Trials count every run: a new group's baseline (measured first) is one trial.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.bench_search",
                                     description=__doc__.split("\n\n")[0])
    cli.add_version(parser)
    parser.add_argument("--space",
                        help="search space YAML (backend sim, or give --profile); with "
                             "--landscape, overrides the landscape's own space")
    parser.add_argument("--landscape", metavar="FILE",
                        help="replay a recorded landscape (real measurements of every config, "
                             "scripts/gpu/landscape.py) instead of the emulator")
    parser.add_argument("--profile", help="sim profile name or YAML path (default: the space's); "
                                          "not with --landscape")
    parser.add_argument("--seeds", type=int, default=20, help="runs per strategy (default 20)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=60, help="trials per run (default 60)")
    parser.add_argument("--noise", type=float, default=None,
                        help=f"tok/s noise CV on the emulator (default {DEFAULT_NOISE_CV}); does "
                             "not apply to --landscape, whose noise is drawn from the recorded "
                             "repeats (giving both is an error)")
    parser.add_argument("--threshold", type=float, default=0.98,
                        help="fraction of the optimum that counts as reached (default 0.98)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help=f"comma-separated subset of {','.join(STRATEGIES)}")
    parser.add_argument("--no-phase-data", action="store_true",
                        help="trials report no phases or accept data (the sampler's fallback)")
    parser.add_argument("--no-warm-start", action="store_true",
                        help="do not run SGLang's default speculative config first (every search does)")
    parser.add_argument("--json", action="store_true", help="print one JSON object keyed by strategy")
    args = parser.parse_args(argv)
    if args.space is None and args.landscape is None:
        parser.error("give --space or --landscape")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", module="optuna")
    try:
        result = benchmark(args.space, profile=args.profile, seeds=args.seeds, budget=args.budget,
                           noise_cv=args.noise, threshold=args.threshold,
                           strategies=[s.strip() for s in args.strategies.split(",") if s.strip()],
                           phase_data=not args.no_phase_data, first_seed=args.first_seed,
                           landscape=args.landscape, warm_start=not args.no_warm_start)
    except (AutotuneError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1, default=str) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
