"""Cost per answer: GPU-seconds to a confirmed winner, the whole path the search takes, replayed.

``python -m benchmarks.search --landscape FILE --cost-per-answer`` (or ``--space S``) runs the
phase model the way a search runs it, every decision taken by the product's own function:

- **trials** through the space's ``suggest`` and an Optuna study, each a
  :class:`~autotune.search.trial_report.TrialReport` built by the search's
  :func:`autotune.search.trainable.report_of` and told as the searcher tells it;
- **the stop rule** asked before every trial through :func:`autotune.search.stopping.check` with
  :func:`autotune.search.stopping.study_noise` (the pooled spread of the trials' own rounds), as
  :class:`autotune.search.searcher.ConstrainedOptunaSearch` asks it; ``budget`` counts Optuna
  trials, as ``budget.trials`` does (a group's baseline is measured inside the trial that needs it);
- **sequential measurement**: each round a draw of the oracle's noise
  (:class:`benchmarks.search.drawn.DrawnEvaluator` in rounds mode), after each round
  :func:`autotune.trial.sequential.decide` against the incumbent that
  :func:`autotune.search.incumbent.incumbent_of` names from the trials so far;
- **the end**: :func:`autotune.search.evidence.trial_evidence`; where it is decisive no finalist
  is re-measured, else the space's ``max(1, search.finalists)`` finalists are, beside fresh
  baselines, ``search.finalist_repeats`` rounds each (:func:`benchmarks.search.conclusion.conclude`,
  the winner policy :func:`autotune.trial.winner.pick_winner`);
- **GPU time**: every server's :class:`~autotune.trial.gpu_time.GpuTime` (start-up, warm-up, the
  rounds it ran; :mod:`benchmarks.search.gpu_model`) as events, added by
  :func:`autotune.trial.gpu_time.count`.

Two phase-model rows: the product default (stop rule and sequential measurement; the rule is the
space's ``measure.sequential``, or the schema's default where the space writes a fixed
``repeats``) and today's path (the full budget, ``measure.repeats`` fixed rounds, finalists always
re-measured). Success: the named winner's true tok/s is at least the threshold of the optimum. The
best peer (random, TPE, the auto_benchmark tiers: no bound, so no stop rule) is counted as
``bench_search --finalists space`` counts it: stopped by the oracle at the first trial whose
confirmed pick reaches the target, a lower bound on what it would pay. The sweep measures every
config and each group's baseline once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.search.evidence import settles, trial_evidence
from autotune.search.incumbent import incumbent_of
from autotune.search.level_answers import levels_of
from autotune.search.stopping import check, study_noise
from autotune.search.trainable import report_of
from autotune.search.trial_report import TrialEntry, TrialReport
from autotune.space._schema_measure import Sequential
from autotune.space.search_space import SearchSpace
from autotune.space.trial_config import config_key
from autotune.trial.gpu_time import BASELINES, TRIALS, Spent, count, events_of
from autotune.trial.result import TrialResult
from autotune.trial.sequential import Evidence, SequentialRule
from benchmarks.search.conclusion import Reading, conclude
from benchmarks.search.drawn import DrawnEvaluator
from benchmarks.search.gpu_model import sweep_events
from benchmarks.search.problem import Problem, replay_problem

__all__ = ["CostRun", "PEER_BUDGET", "ProductRun", "cost_benchmark", "render_cost", "replay", "rule_of"]

#: The peers' budget in bench_search's count (baselines are runs): ample, since they are stopped
#: by the oracle at their first confirmed success.
PEER_BUDGET = 60


def rule_of(space: SearchSpace) -> SequentialRule:
    """The sequential rule the product default measures with: the space's ``measure.sequential``,
    else the schema's default (a space that writes ``measure.repeats`` turns it off; the product
    default does not write it)."""
    seq = space.measure.sequential or Sequential()
    return SequentialRule(min_rounds=seq.min_rounds, max_rounds=seq.max_rounds, confidence=seq.confidence)


class ProductRun:
    """One replayed search: its trials as the driver keeps them, its servers as GPU-time events.

    Args:
        problem: The space and its truth.
        seed: Seed of the measurement noise.
        noise_cv: The emulator's noise (a landscape ignores it).
        rule: Measure trials in rounds with this rule; None: ``measure.repeats`` fixed rounds.

    Attributes:
        entries: The trials, as the search's driver keeps them (``TrialEntry``).
        readings: Every server's reading in order (a group's baseline, then its trial), for the
            conclusion (:func:`benchmarks.search.conclusion.conclude`).
        spent: Every server started, as events.
        baseline_rounds: Rounds each group's baseline measured ahead of a config.
    """

    def __init__(self, problem: Problem, *, seed: int, noise_cv: float, rule: SequentialRule | None) -> None:
        self.p = problem
        self.evaluator = DrawnEvaluator(problem, seed=seed, noise_cv=noise_cv, rounds=True, rule=rule,
                                        incumbent=self.incumbent if rule is not None else None)
        self.entries: list[TrialEntry] = []
        self.readings: list[Reading] = []
        self.spent: list[Spent] = []
        self.baseline_rounds: list[int] = []
        self._params: dict[tuple, dict[str, Any]] = {}
        self._group: dict[tuple, tuple] = {}

    def incumbent(self) -> Evidence | None:
        """The search's incumbent now (the product's :func:`incumbent_of` over the trials)."""
        return incumbent_of(self.p.space, self.entries)

    def group_of(self, key: tuple) -> tuple:
        """The key of a measured config's group baseline (its own key for a baseline)."""
        return self._group.get(key, key)

    def params_of(self, key: tuple) -> dict[str, Any]:
        """A measured config's params, as first proposed."""
        return self._params[key]

    def baseline_of(self, label: str) -> TrialResult | None:
        """A group's stored baseline by the trial's ``baseline_key``."""
        return next((b for k, b in self.evaluator.baselines.items() if repr(k) == label), None)

    def run(self, params: Mapping[str, Any]) -> TrialReport:
        """One trial: the group's baseline first where it has none, then the config."""
        space = self.p.space
        ev = self.evaluator(params)
        key = config_key(params)
        gkey = config_key(space.baseline_params(dict(params)))
        if ev.baseline is not None:
            self.spent += events_of(ev.baseline.gpu_time, BASELINES)
            self._params.setdefault(gkey, space.baseline_params(dict(params)))
            self.readings.append(Reading.of(gkey, ev.baseline, feasible=True, is_baseline=True))
            self.baseline_rounds.append(len(ev.baseline.output_tok_s_repeats))
        self.spent += events_of(ev.result.gpu_time, TRIALS)
        self._params.setdefault(key, dict(params))
        self._group[key] = gkey
        self.readings.append(Reading.of(key, ev.result, is_baseline=ev.result.is_baseline,
                                        feasible=bool(ev.result.feasible)))
        report = report_of(ev.result, space, baseline=ev.baseline, baseline_key=ev.baseline_key)
        self.entries.append(TrialEntry(str(len(self.entries)), dict(params), report))
        return report


@dataclass(frozen=True)
class CostRun:
    """One seed of one row.

    Attributes:
        success: The named winner's true tok/s reaches the target.
        gpu_s: GPU-seconds of every server the search started, its conclusion's included.
        trials: Optuna trials run. servers: Servers started (trials, baselines, finalists).
        stopped: The stop rule ended the search before the budget.
        settled: The trials' evidence was decisive (no finalist re-measured).
        rounds: Rounds each trial measured.
        baseline_rounds: Rounds each group's baseline measured ahead of a config.
        early: Trials stopped early as clearly worse (``stop-worse``).
        of_optimum: The winner's true tok/s over the optimum (None: nothing named).
    """

    success: bool
    gpu_s: float
    trials: int
    servers: int
    stopped: bool
    settled: bool
    rounds: tuple[int, ...]
    baseline_rounds: tuple[int, ...]
    early: int
    of_optimum: float | None


def replay(problem: Problem, *, seed: int, budget: int, noise_cv: float, sequential: bool,
           stop_rule: bool, strategy: str = "phase-model", warm_start: bool = True) -> CostRun:
    """One search, start to named winner (see the module's text)."""
    import optuna

    from benchmarks.search.strategies import make_strategy

    space = problem.space
    sampler = make_strategy(strategy, seed=seed, space=space)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    warm = problem.warm_start if warm_start else None
    if warm is not None and warm.asked:
        study.enqueue_trial(warm.asked)
    run = ProductRun(problem, seed=seed, noise_cv=noise_cv, rule=rule_of(space) if sequential else None)
    stopped = False
    while len(run.entries) < budget:
        if stop_rule and check(sampler, study, sampler_name=strategy, noise=study_noise(study),
                               trials=len(run.entries), budget=budget).stop:
            stopped = True
            break
        trial = study.ask()
        run.run(space.suggest(trial)).tell(study, trial, maximize=True)
    evidence = trial_evidence(space, run.entries, run.baseline_of)
    settled = settles(evidence, rounds=sequential,
                      levels=bool(levels_of(e.report.result for e in run.entries)))
    end = conclude(run, finalists=max(1, space.search.finalists), settled=settled)
    events = [*run.spent, *end.spent]
    totals = count(events)
    true = problem.truth(run.params_of(end.winner))["output_tok_s"] if end.winner is not None else None
    rounds = tuple(len(e.report.result.output_tok_s_repeats) for e in run.entries
                   if e.report.result is not None and e.report.result.ok)
    early = sum(1 for e in run.entries if e.report.result is not None and e.report.result.sequential
                and e.report.result.sequential.get("decision") == "stop-worse")
    return CostRun(success=true is not None and true >= problem.target, gpu_s=totals.gpu_s,
                   trials=len(run.entries), servers=sum(totals.servers.values()), stopped=stopped,
                   settled=settled, rounds=rounds, baseline_rounds=tuple(run.baseline_rounds), early=early,
                   of_optimum=None if true is None else true / problem.optimum)


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "p10": None, "p90": None}
    xs = np.asarray(values, dtype=float)
    return {"median": float(np.median(xs)), "p10": float(np.quantile(xs, 0.1)),
            "p90": float(np.quantile(xs, 0.9))}


def _row(runs: Sequence[CostRun], sweep_gpu_s: float) -> dict[str, Any]:
    gpu = _spread([r.gpu_s for r in runs])
    rounds = [n for r in runs for n in r.rounds]
    return {"success_rate": sum(r.success for r in runs) / len(runs),
            "successes": sum(r.success for r in runs),
            "gpu_s": [r.gpu_s for r in runs], "gpu_s_median": gpu["median"], "gpu_s_p10": gpu["p10"],
            "gpu_s_p90": gpu["p90"],
            "gpu_s_median_of_sweep": (gpu["median"] / sweep_gpu_s
                                      if gpu["median"] is not None and sweep_gpu_s else None),
            "trials_median": _spread([r.trials for r in runs])["median"],
            "servers_median": _spread([r.servers for r in runs])["median"],
            "stopped": sum(r.stopped for r in runs), "settled": sum(r.settled for r in runs),
            "rounds_mean": float(np.mean(rounds)) if rounds else None,
            "early_worse": sum(r.early for r in runs),
            "of_optimum": [r.of_optimum for r in runs],
            "of_optimum_min": min((r.of_optimum for r in runs if r.of_optimum is not None), default=None)}


def cost_benchmark(space_path: str | None = None, *, landscape: str | None = None,
                   profile: str | None = None, seeds: int = 20, first_seed: int = 0,
                   budget: int | None = None, noise_cv: float | None = None, threshold: float = 0.98,
                   peers: Sequence[str] | None = None) -> dict[str, Any]:
    """The two phase-model rows, the best peer and the sweep, ``seeds`` runs each.

    Args:
        budget: Optuna trials of a search (default: the space's ``budget.trials``).
        peers: The peers to run (default: random, TPE, the tiers), the best reported by median
            GPU-s; none: no peer row.

    Raises:
        ValueError: Bad counts, or ``noise_cv`` with a landscape.
    """
    from benchmarks.search.strategies import FINALISTS_OF_SPACE, PEERS, benchmark

    if seeds < 1 or (budget is not None and budget < 1):
        raise ValueError("seeds and budget must be >= 1")
    problem, draw_cv = replay_problem(space_path, profile=profile, threshold=threshold, landscape=landscape,
                                      noise_cv=noise_cv)
    trials = budget if budget is not None else int(problem.space.budget.trials)
    sweep = count(sweep_events(problem))
    seed_list = range(first_seed, first_seed + seeds)
    rows: dict[str, Any] = {}
    for name, sequential, stop in (("stop rule + sequential", True, True),
                                   ("full budget, fixed repeats", False, False)):
        runs = [replay(problem, seed=s, budget=trials, noise_cv=draw_cv, sequential=sequential,
                       stop_rule=stop) for s in seed_list]
        rows[name] = _row(runs, sweep.gpu_s)
    best_peer: dict[str, Any] | None = None
    chosen = list(PEERS) if peers is None else [p for p in peers if p in PEERS]
    if chosen:
        found = benchmark(space_path, profile=profile, seeds=seeds, budget=PEER_BUDGET,
                          noise_cv=None if landscape is not None else draw_cv, threshold=threshold,
                          strategies=chosen, first_seed=first_seed, landscape=landscape,
                          finalists=FINALISTS_OF_SPACE)
        ranked = sorted(((s["gpu_s_median"], n) for n, s in found.items() if s["gpu_s_median"] is not None))
        if ranked:
            name = ranked[0][1]
            s = found[name]
            best_peer = {"strategy": name, "success_rate": s["success_rate"], "gpu_s_median": s["gpu_s_median"],
                         "gpu_s_p10": s["gpu_s_p10"], "gpu_s_p90": s["gpu_s_p90"],
                         "gpu_s_median_of_sweep": s["gpu_s_median_of_sweep"], "trials_median": s["median"]}
    seq = rule_of(problem.space)
    return {"source": landscape or space_path, "configs": len(problem.configs), "seeds": seeds,
            "first_seed": first_seed, "budget": trials, "threshold": threshold,
            "noise_cv": None if landscape is not None else draw_cv,
            "rule": seq.to_dict(), "space_writes_repeats": problem.space.measure.sequential is None,
            "finalists": max(1, problem.space.search.finalists),
            "finalist_repeats": int(problem.space.search.finalist_repeats),
            "rows": rows, "best_peer": best_peer,
            "sweep_gpu_s": sweep.gpu_s, "sweep_servers": sum(sweep.servers.values())}


def _n(v: float | None, digits: int = 0) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def render_cost(result: Mapping[str, Any]) -> str:
    """The rows as plain text."""
    rule = result["rule"]
    lines = [f"cost per answer: {result['source']}  {result['configs']} configs  seeds {result['seeds']}  "
             f"budget {result['budget']} trials  finalists {result['finalists']} x "
             f"{result['finalist_repeats']} rounds",
             ("noise: each round is one draw of the config's recorded repeats" if result["noise_cv"] is None
              else f"noise: each round a log-normal draw, cv {result['noise_cv']:.5f}"),
             (f"sequential rule: {rule['min_rounds']}-{rule['max_rounds']} rounds at {rule['confidence']:.0%}"
              + (" (the schema's default: this space writes measure.repeats, which turns it off in a search)"
                 if result["space_writes_repeats"] else " (the space's)")),
             f"success: the named winner's true tok/s >= {result['threshold']:.0%} of the optimum; "
             "GPU-s: every server started (trials' rounds, baselines, start-ups, finalists where "
             "re-measured), autotune.trial.gpu_time.count", "",
             f"{'row':<40} {'success':>8} {'GPU-s':>7} {'p10-p90':>13} {'of sweep':>8} {'trials':>6} "
             f"{'servers':>7} {'stopped':>7} {'settled':>7} {'rounds':>6} {'worse':>5} {'min of opt':>10}"]
    seeds = result["seeds"]
    for name, r in result["rows"].items():
        lines.append(f"{'phase-model, ' + name:<40} {r['successes']:>5}/{seeds:<2} {_n(r['gpu_s_median']):>7} "
                     f"{_n(r['gpu_s_p10']) + '-' + _n(r['gpu_s_p90']):>13} {_pct(r['gpu_s_median_of_sweep']):>8} "
                     f"{_n(r['trials_median'], 1):>6} {_n(r['servers_median'], 1):>7} "
                     f"{r['stopped']:>7} {r['settled']:>7} {_n(r['rounds_mean'], 2):>6} "
                     f"{r['early_worse']:>5} {_pct(r['of_optimum_min']):>10}")
    peer = result.get("best_peer")
    if peer is not None:
        lines.append(f"{'best peer: ' + peer['strategy']:<40} {peer['success_rate']:>8.0%} "
                     f"{_n(peer['gpu_s_median']):>7} "
                     f"{_n(peer['gpu_s_p10']) + '-' + _n(peer['gpu_s_p90']):>13} "
                     f"{_pct(peer['gpu_s_median_of_sweep']):>8} {_n(peer['trials_median'], 1):>6}   "
                     "(stopped by the oracle at its first confirmed success: a lower bound)")
    lines.append(f"{'sweep':<40} {'':>8} {result['sweep_gpu_s']:>7.0f} {'':>13} {'100%':>8} "
                 f"{'':>6} {result['sweep_servers']:>7}")
    lines.append("trials: Optuna trials (a group's baseline runs inside the trial that needs it); "
                 "rounds: mean rounds a trial measured; worse: trials stopped early as clearly worse; "
                 "settled: runs whose trials' evidence was decisive (no finalist re-measured)")
    return "\n".join(lines)
