"""What ``bench_search`` measures against: a space's truth, and the oracle of one run.

Two sources of truth go through the same judging code (:class:`Oracle`, :func:`load_problem`):

- :class:`EmulatorTruth`: the model-only evaluator (:mod:`autotune.simtools.evaluate`), with
  log-normal noise on tok/s and accepted-drafts histograms drawn from the model's acceptance;
- :class:`benchmarks.search.landscape.LandscapeEvaluator`: a recorded sweep of real measurements, whose
  noise is drawn from each config's recorded repeats.

A source has ``space``, ``expected(params)`` (``status`` ``"ok"`` or ``"failed"``,
``output_tok_s``, ``phases``, ``accept_length``, ...), ``accept_probs(params)``,
``draw(params, truth, *, seed, n, noise_cv)`` (the n-th noisy measurement in seed ``seed``) and
``info()`` (what the report header says about it).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.errors import AutotuneError
from autotune.search.trial_report import TrialReport
from autotune.simtools.evaluate import ModelEvaluator
from autotune.space.trial_config import config_key
from autotune.space.workload import num_prompts_of
from autotune.trial.gpu_time import BASELINES, TRIALS, GpuTotals, Spent, count, events_of
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.verdict import VERDICT_PHASE_KEYS, break_even_constraint, pays
from benchmarks.search.conclusion import Reading, conclude
from benchmarks.search.drawn import DrawnEvaluator, histogram_of

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace


def noise_rng(seed: int, key: tuple, n: Any) -> np.random.Generator:
    """The generator of measurement ``n`` of config ``key`` in seed ``seed``, whoever asks."""
    digest = hashlib.blake2b(repr((seed, key, n)).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "big"))


def min_speedup(space: SearchSpace) -> float:
    """The space's ``min_speedup`` (1.0 when it sets none): what :func:`autotune.trial.verdict.pays`
    compares with here."""
    return float(getattr(space.constraints, "min_speedup", 1.0) or 1.0)


def runs(truth: Mapping[str, Any]) -> bool:
    """Whether a config ran and has a tok/s; unknown tok/s is a failure, never 0."""
    return truth.get("status") == Status.OK and truth.get("output_tok_s") is not None


class EmulatorTruth:
    """The emulator's expectation as the truth, with bench_search's synthetic noise.

    Args:
        evaluator: A noise-free :class:`ModelEvaluator`.
        requests: Requests per trial (num_prompts x repeats), for the histogram counts.
    """

    def __init__(self, evaluator: ModelEvaluator, *, requests: int) -> None:
        self.evaluator = evaluator
        self.space = evaluator.space
        self.requests = requests
        self._hist: dict[tuple, np.ndarray | None] = {}

    def info(self) -> dict[str, Any]:
        return {"oracle": "emulator", "profile": self.evaluator.profile.name}

    def expected(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self.evaluator.expected(params)

    def accept_probs(self, params: Mapping[str, Any]) -> np.ndarray | None:
        """P(j drafts accepted per cycle), averaged over the workload's prompts."""
        key = config_key(params)
        if key not in self._hist:
            model = self.evaluator.model(params)
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

    def draw(self, params: Mapping[str, Any], truth: Mapping[str, Any], *, seed: int, n: int,
             noise_cv: float) -> dict[str, Any]:
        """Log-normal tok/s noise; phase times move with the same draw (``cycle_ms = wall /
        cycles``); accept length and histogram from a multinomial draw of the cycles run."""
        rng = noise_rng(seed, config_key(params), n)
        cv = noise_cv
        f = math.exp(rng.normal(0.0, cv) - cv * cv / 2) if cv > 0 else 1.0
        out: dict[str, Any] = {
            "tok_s": truth["output_tok_s"] * f,
            "phases": {k: (v / f if isinstance(v, (int, float)) else None)
                       for k, v in (truth.get("phases") or {}).items() if k.endswith("_ms")}}
        probs = self.accept_probs(params)
        if probs is not None:
            accept = truth["accept_length"]
            cycles = max(int(self.requests * (self.evaluator.shape.output_len - 1) / accept), 1)
            hist = rng.multinomial(cycles, probs)
            out["histogram"] = [int(h) for h in hist]
            out["accept_length"] = 1.0 + float(np.dot(np.arange(len(hist)), hist)) / hist.sum()
        return out


@dataclass
class Problem:
    """One space and its truth: the configs, the true optimum and the target.

    Attributes:
        space: The loaded space.
        evaluator: The source of truth and noise (:class:`EmulatorTruth` or a
            :class:`benchmarks.search.landscape.LandscapeEvaluator`).
        configs: Every config of the space (enumeration order).
        optimum: Best true feasible tok/s (speculative configs and baselines).
        optimum_params: Its config.
        target: ``threshold * optimum``.
        groups: Number of non-speculative groups.
    """

    space: SearchSpace
    evaluator: Any
    configs: list[dict[str, Any]]
    optimum: float
    optimum_params: dict[str, Any]
    target: float
    groups: int
    _feasible: dict[tuple, bool] = field(default_factory=dict, repr=False)

    def truth(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self.evaluator.expected(params)

    @functools.cached_property
    def warm_start(self) -> Any:
        """SGLang's default speculative config in this space (:func:`autotune.space.warm_start.sglang_default`),
        found once: every strategy and seed starts from it."""
        from autotune.space.warm_start import sglang_default

        return sglang_default(self.space)

    def baseline_truth(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return self.evaluator.expected(self.space.baseline_params(dict(params)))

    def accept_probs(self, params: Mapping[str, Any]) -> np.ndarray | None:
        return self.evaluator.accept_probs(params)

    def truly_feasible(self, params: Mapping[str, Any]) -> bool:
        """Feasible on the truth (noise-free, or the recorded medians)."""
        key = config_key(params)
        if key not in self._feasible:
            rec = self.truth(params)
            if not self.space.is_speculative(params):
                ok = runs(rec)
            else:
                base = self.baseline_truth(params)
                ok = runs(rec) and runs(base) and pays(
                    rec["output_tok_s"] / base["output_tok_s"], min_speedup=min_speedup(self.space))
            self._feasible[key] = ok
        return self._feasible[key]


def load_problem(space_path: str | None = None, *, profile: str | None = None,
                 threshold: float = 0.98, landscape: str | None = None) -> Problem:
    """Load a space (on the emulator, or replayed from a recorded landscape), enumerate it and
    find its true optimum (baselines included).

    Args:
        space_path: The space; with ``landscape``, overrides the landscape's own ``space``.
        profile: Emulator profile override (not with ``landscape``).
        threshold: Fraction of the optimum that counts as reached.
        landscape: A recorded landscape file (:mod:`benchmarks.search.landscape`).
    """
    from autotune.space.search_space import load_space

    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if landscape is not None:
        from benchmarks.search.landscape import LandscapeEvaluator, load_landscape

        if profile is not None:
            raise ValueError("--profile does not apply to a recorded landscape (its numbers are "
                             "measured, not modelled)")
        source: Any = LandscapeEvaluator(load_landscape(landscape, space=space_path))
        space, where = source.space, landscape
    else:
        if space_path is None:
            raise ValueError("give a space (--space) or a recorded landscape (--landscape)")
        space = load_space(space_path)
        requests = num_prompts_of(space.workload) * int(getattr(space.measure, "repeats", 1) or 1)
        source = EmulatorTruth(ModelEvaluator(space, profile=profile, noise_cv=0.0),
                               requests=requests)
        where = space_path
    configs = [dict(c) for c in space.enumerate()]
    problem = Problem(space=space, evaluator=source, configs=configs, optimum=math.nan,
                      optimum_params={}, target=math.nan, groups=0)
    best, best_params = None, None
    groups: set[tuple] = set()
    for cfg in configs:
        candidates = [cfg]
        base = space.baseline_params(cfg)
        gk = config_key(base)
        if gk not in groups:
            groups.add(gk)
            candidates.append(base)
        for params in candidates:
            tok_s = problem.truth(params).get("output_tok_s")
            if problem.truly_feasible(params) and (best is None or tok_s > best):
                best, best_params = tok_s, params
    if best is None or best_params is None:  # set together
        raise AutotuneError(f"no config of {where} runs" + ("" if landscape else " on this profile"))
    problem.optimum, problem.optimum_params = best, dict(best_params)
    problem.target, problem.groups = threshold * best, len(groups)
    return problem


def replay_problem(space_path: str | None, *, profile: str | None, threshold: float, landscape: str | None,
                   noise_cv: float | None) -> tuple[Problem, float]:
    """The problem a replay (the stop rule's, the cost per answer's) runs on, and the noise CV it
    draws with: a landscape's own recorded repeats (0.0 here), else ``noise_cv``, else the measured
    noise of the H200 repeats.

    Raises:
        ValueError: ``noise_cv`` given with a landscape.
    """
    from benchmarks.search.noise import measured_noise

    if landscape is not None and noise_cv is not None:
        raise ValueError("--noise does not apply to a recorded landscape: its noise is drawn from "
                         "each config's recorded repeats")
    if landscape is None and noise_cv is None:
        noise_cv = measured_noise().cv
    problem = load_problem(space_path, profile=profile, threshold=threshold, landscape=landscape)
    return problem, 0.0 if noise_cv is None else noise_cv


class Oracle:
    """Measures configs for one run (one strategy, one seed) and tracks its pick.

    Args:
        problem: The space and its truth.
        seed: Seed of the measurement noise.
        noise_cv: Relative spread of measured tok/s (the emulator's; a landscape ignores it).
        phase_data: Whether trials report phases and accept data (off: only tok/s and verdict).
        finalists: None: the pick after each trial is the best measured feasible config (mean of
            its measurements). A number: the pick is what the search, stopped there, would name
            after re-measuring that many finalists beside fresh baselines
            (:mod:`benchmarks.search.conclusion`), and ``success_at`` counts the
            conclusion's runs too.

    Raises:
        ValueError: ``finalists`` below 1.
    """

    def __init__(self, problem: Problem, *, seed: int, noise_cv: float,
                 phase_data: bool = True, finalists: int | None = None) -> None:
        if finalists is not None and finalists < 1:
            raise ValueError(f"finalists must be >= 1 (or None: no conclusion), got {finalists}")
        self.p = problem
        self.evaluator = DrawnEvaluator(problem, seed=seed, noise_cv=noise_cv)
        self.phase_data = phase_data
        self.finalists = finalists
        self.trials = 0
        self.baselines = 0
        self.failed = 0
        self.duplicates = 0
        self.success_at: int | None = None
        self.conclusion_runs: int | None = None  # what the successful conclusion cost
        # Every server the run started, as GPU-time events; their count where it succeeded
        # (with the successful conclusion's servers), by the search's own count.
        self.spent: list[Spent] = []
        self.gpu_at_success: GpuTotals | None = None
        self.readings: list[Reading] = []  # one per run, in order
        self._params: dict[tuple, dict[str, Any]] = {}
        self._group: dict[tuple, tuple] = {}
        self._sums: dict[tuple, float] = {}
        self._feasible: dict[tuple, bool] = {}
        self._true: dict[tuple, float] = {}

    def _count(self, key: tuple, params: Mapping[str, Any], result: TrialResult) -> None:
        """Book one run the evaluator just made of ``params``."""
        if self.evaluator.counts[key] > 1:
            self.duplicates += 1
        self.trials += 1
        self._params.setdefault(key, dict(params))
        if not result.ok or result.output_tok_s is None:  # an ok result measured its tok/s
            self.failed += 1
            return
        self._sums[key] = self._sums.get(key, 0.0) + result.output_tok_s
        self._true[key] = self.p.truth(params)["output_tok_s"]

    def group_of(self, key: tuple) -> tuple:
        """The key of a measured config's group baseline (its own key for a baseline)."""
        return self._group.get(key, key)

    def params_of(self, key: tuple) -> dict[str, Any]:
        """A measured config's params, as first proposed."""
        return self._params[key]

    def _update_pick(self) -> None:
        if self.success_at is not None:
            return
        if self.finalists is not None:
            end = conclude(self, finalists=self.finalists)
            if end.winner is not None and self._true[end.winner] >= self.p.target:
                self.success_at, self.conclusion_runs = self.trials + end.runs, end.runs
                self.gpu_at_success = count([*self.spent, *end.spent])
            return
        if self.pick_reaches():
            self.success_at = self.trials
            self.gpu_at_success = count(self.spent)

    def pick(self) -> tuple | None:
        """The key of the best measured feasible config (mean of its measurements), None if none."""
        best_key, best = None, -math.inf
        for key, ok in self._feasible.items():
            if ok:
                mean = self._sums[key] / self.evaluator.counts[key]
                if mean > best:
                    best_key, best = key, mean
        return best_key

    def true_of(self, key: tuple) -> float:
        """The true tok/s of a measured config."""
        return self._true[key]

    def pick_reaches(self) -> bool:
        """Whether the pick's true tok/s is at the target now."""
        key = self.pick()
        return key is not None and self._true[key] >= self.p.target

    def run(self, params: Mapping[str, Any]) -> TrialReport:
        """Measure one proposed config (and its group's baseline first, if new)."""
        space = self.p.space
        base_params = space.baseline_params(dict(params))
        gkey = config_key(base_params)
        is_baseline = not space.is_speculative(params)
        if not self.evaluator.has_baseline(params):
            # The group's baseline is its own run, and the pick is updated after it.
            self.baselines += 1
            base = self.evaluator(base_params).result
            # A baseline the sampler asked for is its trial; one run ahead of a config, its group's.
            self.spent += events_of(base.gpu_time, TRIALS if is_baseline else BASELINES)
            self._count(gkey, base_params, base)
            self.readings.append(Reading.of(gkey, base, feasible=True, is_baseline=True))
            if base.ok:
                self._feasible[gkey] = True
            self._update_pick()
            if is_baseline:
                return self._report(base)
        if is_baseline:
            # The stored baseline is reused; nothing new is run.
            return self._report(self.evaluator(params).result)
        result = self.evaluator(params).result
        self.spent += events_of(result.gpu_time, TRIALS)
        key = config_key(params)
        self._group[key] = gkey
        self._count(key, params, result)
        # The trial's own verdict: this reading against the group's stored baseline reading.
        self.readings.append(Reading.of(key, result, is_baseline=False, feasible=bool(result.feasible)))
        if result.ok:
            base = self.evaluator.baselines[gkey]
            mean = self._sums[key] / self.evaluator.counts[key]
            self._feasible[key] = bool(base.ok and base.output_tok_s is not None
                                       and pays(mean / base.output_tok_s, min_speedup=min_speedup(space)))
        self._update_pick()
        return self._report(result)

    def _report(self, result: TrialResult) -> TrialReport:
        """The objective, constraints and user attrs a trial reports (as the trainable does)."""
        is_baseline = result.is_baseline
        base_status = None if result.baseline_status is None else str(result.baseline_status)
        be = break_even_constraint(result, min_speedup=min_speedup(self.p.space))
        if not result.ok:
            attrs: dict[str, Any] = {"status": "failed", "is_baseline": is_baseline, "output_tok_s": None,
                     "baseline_status": base_status, "failure": result.failure}
            return TrialReport(objective=None, attrs=attrs, constraints={"failed": 1.0, "break_even": 1.0})
        tok_s = result.output_tok_s
        attrs = {"is_baseline": is_baseline, "output_tok_s": tok_s}
        # What was drawn, without what the verdict added (the samplers read the measured phases).
        phases = {k: v for k, v in (result.phases or {}).items() if k not in VERDICT_PHASE_KEYS}
        if is_baseline:
            attrs.update(status="feasible", baseline_tok_s=tok_s, speedup=1.0)
            if self.phase_data:
                attrs["baseline_decode_step_ms"] = phases.get("cycle_ms")
                attrs["phases"] = phases
            return TrialReport(objective=tok_s, attrs=attrs, constraints={"failed": 0.0, "break_even": be})
        attrs.update(status=str(result.status), baseline_tok_s=result.baseline_tok_s,
                     speedup=result.speedup, baseline_status=base_status)
        if self.phase_data:
            attrs["baseline_decode_step_ms"] = result.baseline_decode_step_ms
            attrs["phases"] = phases
            attrs["accept_length"] = result.accept_length
            attrs["spec_correct_drafts_histogram"] = histogram_of(result)
        return TrialReport(objective=tok_s, attrs=attrs, constraints={"failed": 0.0, "break_even": be})
