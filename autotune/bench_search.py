"""How many trials each search strategy needs to get within 2% of the best config.

``python -m autotune.bench_search --space S [--profile P] --seeds 20 --budget B [--noise CV]
[--json]`` runs, on the model-only evaluator (:mod:`autotune.sim.evaluate`) with measurement noise:

- ``grid``: every config in the order of SGLang's ``bench_speculative.py``;
- ``random``: Optuna's random sampler;
- ``tpe``: Optuna's TPE with its defaults (10 random start-up trials);
- ``phase-model``: :class:`autotune.samplers.PhaseModelSampler`.

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
measurements); the run succeeds at the first trial where the pick's true (noise-free) tok/s is at
least ``--threshold`` (0.98) of the true optimum: the best feasible config of the space, baselines
included. Noise is common across strategies: the n-th measurement of a config in seed s gets the
same noise whichever strategy asks for it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.errors import AutotuneError
from autotune.samplers import SAMPLER_NAMES, make_sampler
from autotune.samplers._candidates import config_key
from autotune.sim.evaluate import ModelEvaluator
from autotune.sim.model import ModelConfig, PerformanceModel

OURS = "phase-model"
STRATEGIES = ("grid", "random", "tpe", OURS)


@dataclass
class Problem:
    """One space on one profile: the configs, the true optimum and the target.

    Attributes:
        space: The loaded space.
        evaluator: Noise-free evaluator (cached).
        configs: Every config of the space (enumeration order).
        optimum: Best true feasible tok/s (speculative configs and baselines).
        optimum_params: Its config.
        target: ``threshold * optimum``.
        groups: Number of non-speculative groups.
        repeats_prompts: Requests per trial (num_prompts x repeats), for the histogram counts.
    """

    space: Any
    evaluator: ModelEvaluator
    configs: list[dict[str, Any]]
    optimum: float
    optimum_params: dict[str, Any]
    target: float
    groups: int
    requests: int
    _hist: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)

    def truth(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self.evaluator.expected(params)

    def baseline_truth(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self.evaluator.expected(self.space.baseline_params(dict(params)))

    def accept_probs(self, params: Mapping[str, Any]) -> np.ndarray | None:
        """P(j drafts accepted per cycle), averaged over the workload's prompts."""
        key = config_key(params)
        if key not in self._hist:
            cfg = self.space.trial_config(dict(params))
            model = PerformanceModel(self.evaluator.profile,
                                     ModelConfig.from_server_args(cfg.server_args, cfg.env))
            if model.config.spec is None:
                self._hist[key] = None
            else:
                # Each prompt scales acceptance by its own factor, as the emulator does.
                texts = getattr(self.evaluator.shape, "prompts", ()) or ()
                factors = [model.prompt_factor(t) for t in texts] or [1.0]
                dists = [model.acceptance(f).probs for f in factors]
                width = max(len(d) for d in dists)
                mix = np.zeros(width)
                for d in dists:
                    mix[:len(d)] += np.asarray(d)
                self._hist[key] = mix / mix.sum()
        return self._hist[key]


def load_problem(space_path: str, *, profile: str | None = None,
                 threshold: float = 0.98) -> Problem:
    """Load a space, enumerate it and find its true optimum (baselines included)."""
    from autotune.space import load_space

    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    space = load_space(space_path)
    ev = ModelEvaluator(space, profile=profile, noise_cv=0.0)
    configs = [dict(c) for c in space.enumerate()]
    best, best_params = None, None
    groups: set[tuple] = set()

    def consider(rec: Mapping[str, Any], params: dict[str, Any]) -> None:
        nonlocal best, best_params
        tok_s = rec.get("output_tok_s")
        if tok_s is not None and (best is None or tok_s > best):
            best, best_params = tok_s, params

    for cfg in configs:
        rec = ev.expected(cfg)
        if rec.get("feasible"):
            consider(rec, cfg)
        base = space.baseline_params(cfg)
        gk = config_key(base)
        if gk not in groups:
            groups.add(gk)
            b = ev.expected(base)
            if b.get("status") == "ok":
                consider(b, base)
    if best is None:
        raise AutotuneError(f"no config of {space_path} runs on this profile")
    workload = space.workload or {}
    requests = int(workload.get("num_prompts") or 8) * int(getattr(space.measure, "repeats", 1) or 1)
    return Problem(space=space, evaluator=ev, configs=configs, optimum=best,
                   optimum_params=dict(best_params), target=threshold * best,
                   groups=len(groups), requests=requests)


def _noise_rng(seed: int, key: tuple, n: int) -> np.random.Generator:
    digest = hashlib.blake2b(repr((seed, key, n)).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "big"))


@dataclass
class Measured:
    """What one trial reports to Optuna."""

    value: float
    attrs: dict[str, Any]
    constraints: dict[str, float]


class Oracle:
    """Measures configs for one run (one strategy, one seed) and tracks its pick.

    Args:
        problem: The space and its truth.
        seed: Seed of the measurement noise.
        noise_cv: Relative spread of measured tok/s.
        phase_data: Whether trials report phases and accept data (off: only tok/s and verdict).
    """

    def __init__(self, problem: Problem, *, seed: int, noise_cv: float,
                 phase_data: bool = True) -> None:
        self.p = problem
        self.seed = seed
        self.cv = noise_cv
        self.phase_data = phase_data
        self.trials = 0
        self.baselines = 0
        self.failed = 0
        self.duplicates = 0
        self.success_at: int | None = None
        self._counts: dict[tuple, int] = {}
        self._sums: dict[tuple, float] = {}
        self._feasible: dict[tuple, bool] = {}
        self._true: dict[tuple, float] = {}
        self._baseline: dict[tuple, dict[str, Any]] = {}

    def _measure(self, params: Mapping[str, Any], truth: Mapping[str, Any]) -> dict[str, Any]:
        key = config_key(params)
        n = self._counts.get(key, 0)
        if n:
            self.duplicates += 1
        self._counts[key] = n + 1
        self.trials += 1
        if truth.get("status") != "ok" or truth.get("output_tok_s") is None:
            self.failed += 1
            return {"ok": False}
        rng = _noise_rng(self.seed, key, n)
        cv = self.cv
        f = math.exp(rng.normal(0.0, cv) - cv * cv / 2) if cv > 0 else 1.0
        out = {"ok": True, "tok_s": truth["output_tok_s"] * f,
               "phases": {k: (v / f if isinstance(v, (int, float)) else None)
                          for k, v in (truth.get("phases") or {}).items()
                          if k.endswith("_ms")}}
        probs = self.p.accept_probs(params)
        if probs is not None:
            accept = truth["accept_length"]
            cycles = max(int(self.p.requests * (self.p.evaluator.shape.output_len - 1) / accept), 1)
            hist = rng.multinomial(cycles, probs)
            out["histogram"] = [int(h) for h in hist]
            out["accept_length"] = 1.0 + float(np.dot(np.arange(len(hist)), hist)) / hist.sum()
        self._sums[key] = self._sums.get(key, 0.0) + out["tok_s"]
        self._true[key] = truth["output_tok_s"]
        return out

    def _update_pick(self) -> None:
        if self.success_at is not None:
            return
        best_key, best = None, -math.inf
        for key, ok in self._feasible.items():
            if ok:
                mean = self._sums[key] / self._counts[key]
                if mean > best:
                    best_key, best = key, mean
        if best_key is not None and self._true[best_key] >= self.p.target:
            self.success_at = self.trials

    def run(self, params: Mapping[str, Any]) -> Measured:
        """Measure one proposed config (and its group's baseline first, if new)."""
        space = self.p.space
        base_params = space.baseline_params(dict(params))
        gkey = config_key(base_params)
        is_baseline = not space.is_speculative(params)
        if gkey not in self._baseline:
            self.baselines += 1
            m = self._measure(base_params, self.p.truth(base_params))
            self._baseline[gkey] = m
            if m["ok"]:
                self._feasible[gkey] = True
            self._update_pick()
            if is_baseline:
                return self._report(m, None, is_baseline=True)
        if is_baseline:
            # The stored baseline is reused, as the trainable does; nothing new is run.
            return self._report(self._baseline[gkey], None, is_baseline=True)
        base = self._baseline[gkey]
        m = self._measure(params, self.p.truth(params))
        key = config_key(params)
        if m["ok"]:
            mean = self._sums[key] / self._counts[key]
            self._feasible[key] = bool(base["ok"] and mean > base["tok_s"] * _min_speedup(space))
        self._update_pick()
        return self._report(m, base, is_baseline=False)

    def _report(self, m: Mapping[str, Any], base: Mapping[str, Any] | None, *,
                is_baseline: bool) -> Measured:
        """The objective, constraints and user attrs a trial reports (as the trainable does)."""
        base_status = None if base is None else ("failed" if not base["ok"] else "feasible")
        if not m["ok"]:
            attrs = {"status": "failed", "is_baseline": is_baseline, "output_tok_s": None,
                     "objective_unmeasured": True, "baseline_status": base_status}
            return Measured(value=0.0, attrs=attrs,
                            constraints={"failed": 1.0, "break_even": 1.0})
        tok_s = m["tok_s"]
        attrs: dict[str, Any] = {"is_baseline": is_baseline, "output_tok_s": tok_s}
        if is_baseline:
            attrs.update(status="feasible", baseline_tok_s=tok_s, speedup=1.0)
            if self.phase_data:
                attrs["baseline_decode_step_ms"] = m["phases"].get("cycle_ms")
                attrs["phases"] = m["phases"]
            return Measured(value=tok_s, attrs=attrs, constraints={"failed": 0.0, "break_even": 0.0})
        base_ok = base is not None and base["ok"]
        speedup = tok_s / base["tok_s"] if base_ok else None
        feasible = speedup is not None and speedup > _min_speedup(self.p.space)
        attrs.update(status="feasible" if feasible else "infeasible",
                     baseline_tok_s=base["tok_s"] if base_ok else None, speedup=speedup,
                     baseline_status=base_status)
        if self.phase_data:
            attrs["baseline_decode_step_ms"] = base["phases"].get("cycle_ms") if base_ok else None
            attrs["phases"] = m["phases"]
            attrs["accept_length"] = m.get("accept_length")
            attrs["spec_correct_drafts_histogram"] = m.get("histogram")
        be = (_min_speedup(self.p.space) - speedup + 1e-9) if speedup is not None else 1.0
        return Measured(value=tok_s, attrs=attrs, constraints={"failed": 0.0, "break_even": be})


def _min_speedup(space: Any) -> float:
    return float(getattr(space.constraints, "min_speedup", 1.0) or 1.0)


@dataclass
class RunResult:
    """One strategy, one seed."""

    trials_to_target: int | None
    trials: int
    baselines: int
    failed: int
    duplicates: int
    seconds: float


def run_strategy(problem: Problem, strategy: str, *, seed: int, budget: int, noise_cv: float,
                 phase_data: bool = True) -> RunResult:
    """Run one strategy through an Optuna study until it reaches the target or the budget."""
    import optuna

    t0 = time.perf_counter()
    sampler = make_sampler(strategy, seed=seed, space=problem.space)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    oracle = Oracle(problem, seed=seed, noise_cv=noise_cv, phase_data=phase_data)
    while oracle.trials < budget and oracle.success_at is None:
        trial = study.ask()
        params = problem.space.suggest(trial)
        measured = oracle.run(params)
        for k, v in measured.attrs.items():
            trial.set_user_attr(k, v)
        for k, v in measured.constraints.items():
            trial.set_constraint(k, v)
        study.tell(trial, measured.value)
    hit = oracle.success_at if oracle.success_at is not None and oracle.success_at <= budget \
        else None
    return RunResult(trials_to_target=hit, trials=oracle.trials, baselines=oracle.baselines,
                     failed=oracle.failed, duplicates=oracle.duplicates,
                     seconds=time.perf_counter() - t0)


def grid_full(problem: Problem, *, seed: int, noise_cv: float) -> int | None:
    """Trials the grid needs with no budget (it runs through the whole space at most)."""
    from autotune.samplers import GridOrderSampler

    grid = GridOrderSampler(problem.space, seed=seed)
    oracle = Oracle(problem, seed=seed, noise_cv=noise_cv, phase_data=False)
    for i in grid.order:
        oracle.run(grid.table.configs[i])
        if oracle.success_at is not None:
            return oracle.success_at
    return None


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
    }


def benchmark(space_path: str, *, profile: str | None = None, seeds: int = 20, budget: int = 60,
              noise_cv: float = 0.02, threshold: float = 0.98,
              strategies: Sequence[str] = STRATEGIES, phase_data: bool = True,
              first_seed: int = 0) -> dict[str, Any]:
    """Run every strategy on ``seeds`` seeds; one summary per strategy, keyed by name."""
    if seeds < 1 or budget < 1:
        raise ValueError("seeds and budget must be >= 1")
    if noise_cv < 0:
        raise ValueError(f"noise must be >= 0, got {noise_cv}")
    unknown = [s for s in strategies if s not in SAMPLER_NAMES]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {', '.join(SAMPLER_NAMES)}")
    problem = load_problem(space_path, profile=profile, threshold=threshold)
    seed_list = range(first_seed, first_seed + seeds)
    out: dict[str, Any] = {}
    for name in strategies:
        runs = [run_strategy(problem, name, seed=s, budget=budget, noise_cv=noise_cv,
                             phase_data=phase_data) for s in seed_list]
        out[name] = summarize(runs, budget=budget)
    common = {"space": space_path, "profile": problem.evaluator.profile.name,
              "configs": len(problem.configs), "groups": problem.groups,
              "optimum_tok_s": problem.optimum, "optimum_params": problem.optimum_params,
              "target_tok_s": problem.target, "noise_cv": noise_cv, "seeds": seeds}
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
    return out


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def render(result: Mapping[str, Any]) -> str:
    """Plain-text table of a :func:`benchmark` result."""
    any_summary = next(iter(result.values()))
    a = any_summary
    lines = [(f"space {a['space']}  profile {a['profile']}  {a['configs']} configs in "
              f"{a['groups']} groups  noise cv {a['noise_cv']}  seeds {a['seeds']}"),
             (f"optimum {a['optimum_tok_s']:.2f} tok/s  target (>= "
              f"{a['target_tok_s'] / a['optimum_tok_s']:.0%}) {a['target_tok_s']:.2f}  at "
              f"{a['optimum_params']}"),
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
    lines.append("Trials count every run: a new group's baseline (measured first) is one trial.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.bench_search",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", required=True, help="search space YAML (backend sim, or give --profile)")
    parser.add_argument("--profile", help="sim profile name or YAML path (default: the space's)")
    parser.add_argument("--seeds", type=int, default=20, help="runs per strategy (default 20)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=60, help="trials per run (default 60)")
    parser.add_argument("--noise", type=float, default=0.02, help="tok/s noise CV (default 0.02)")
    parser.add_argument("--threshold", type=float, default=0.98,
                        help="fraction of the optimum that counts as reached (default 0.98)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help=f"comma-separated subset of {','.join(STRATEGIES)}")
    parser.add_argument("--no-phase-data", action="store_true",
                        help="trials report no phases or accept data (the sampler's fallback)")
    parser.add_argument("--json", action="store_true", help="print one JSON object keyed by strategy")
    args = parser.parse_args(argv)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", module="optuna")
    try:
        result = benchmark(args.space, profile=args.profile, seeds=args.seeds, budget=args.budget,
                           noise_cv=args.noise, threshold=args.threshold,
                           strategies=[s.strip() for s in args.strategies.split(",") if s.strip()],
                           phase_data=not args.no_phase_data, first_seed=args.first_seed)
    except (AutotuneError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1, default=str) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
