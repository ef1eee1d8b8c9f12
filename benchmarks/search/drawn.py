"""bench_search's evaluators: a problem's truth, drawn with its noise, judged as a trial is.

:class:`DrawnEvaluator` is the :class:`autotune.trial.evaluator.Evaluator` of ``bench_search``,
over either source of truth of a :class:`~benchmarks.search.problem.Problem`: the
emulator's model alone (:class:`~benchmarks.search.problem.EmulatorTruth`) or a recorded
landscape (:class:`~benchmarks.search.landscape.LandscapeEvaluator`, the synthetic
families included). A config's n-th evaluation in seed s is its source's n-th draw; the result
is a :class:`~autotune.trial.result.TrialResult` judged by :func:`autotune.trial.verdict.judge`,
the verdict the search's trials get.

With ``rounds=True`` (the cost-per-answer replay, :mod:`benchmarks.search.cost_replay`) a server
measures in rounds as the product's does: each round is the config's next draw, the result's
tok/s is the median of its rounds and ``output_tok_s_repeats`` holds them; given a
:class:`~autotune.trial.sequential.SequentialRule` and an incumbent, a trial asks
:func:`autotune.trial.sequential.decide` (the function the search's trials ask) after every
round, exactly where :class:`autotune.trial.evaluator.MeasuringEvaluator` asks it: a trial (a
speculative config, or a baseline the sampler proposed) and a group's baseline measured ahead of
a config measure in rounds; the finalists' fresh servers measure a fixed count. Every server's
GPU time counts the rounds it ran.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autotune.space.trial_config import config_key
from autotune.trial.evaluator import Evaluation
from autotune.trial.outcome import Failure, Status, is_oom_log
from autotune.trial.result import TrialResult
from autotune.trial.sequential import Evidence, SequentialRule, round_consultant
from autotune.trial.verdict import judge
from benchmarks.search.gpu_model import server_times

if TYPE_CHECKING:
    from benchmarks.search.problem import Problem

__all__ = ["DrawnEvaluator", "histogram_of"]

#: Where a drawn result keeps its accepted-drafts histogram: a trial's records do the same.
_HIST = "spec_correct_drafts_histogram"


def histogram_of(result: TrialResult) -> list[int] | None:
    """The accepted-drafts histogram a drawn result carries, None when it has none."""
    for rec in result.records:
        hist = (rec.get("spec") or {}).get(_HIST)
        if hist is not None:
            return hist
    return None


class DrawnEvaluator:
    """Evaluates configs of one problem for one run (one seed): draws, then judges.

    As the search's trials do, a speculative config is judged against its group's baseline, run
    the first time the group is seen (kept whether it ran or not: bench_search runs a group's
    baseline once), or run again with ``fresh_baseline``; a baseline config is its group's
    baseline, run once and read back after. The space's SLOs are not judged (bench_search
    counts trials to the best tok/s).

    Args:
        problem: The space and its truth (``problem.evaluator`` is read at each draw).
        seed: Seed of the measurement noise.
        noise_cv: Relative spread of drawn tok/s (the emulator's; a landscape ignores it).
        rounds: Measure in rounds, one draw each, the median reported (a server then runs
            again for every baseline trial, as the search's does); False: one draw a server.
        rule: With ``rounds`` and ``incumbent``: trials measure until
            :func:`~autotune.trial.sequential.decide` stops them.
        incumbent: The search's incumbent now (read after every round), None when there is none.

    Attributes:
        counts: Draws taken so far, by config key (the next draw of a config is its ``n``).
        baselines: Each group's baseline, judged, by the key of its params.
    """

    def __init__(self, problem: Problem, *, seed: int, noise_cv: float, rounds: bool = False,
                 rule: SequentialRule | None = None,
                 incumbent: Callable[[], Evidence | None] | None = None) -> None:
        self.problem = problem
        self.seed = seed
        self.noise_cv = noise_cv
        self.rounds = rounds
        self.rule = rule
        self.incumbent = incumbent
        self.counts: dict[tuple, int] = {}
        self.baselines: dict[tuple, TrialResult] = {}

    def fork(self) -> DrawnEvaluator:
        """A copy that draws on from here without moving this one's stream (what a hypothetical
        conclusion reads)."""
        other = DrawnEvaluator(self.problem, seed=self.seed, noise_cv=self.noise_cv, rounds=self.rounds,
                               rule=self.rule, incumbent=self.incumbent)
        other.counts, other.baselines = dict(self.counts), dict(self.baselines)
        return other

    def draw(self, params: Mapping[str, Any], *, rounds: int | None = None,
             consult: Callable[[list[float]], bool] | None = None) -> TrialResult:
        """The config's next measurement, not judged (a failed one says its kind), with the GPU
        time its server took (:mod:`benchmarks.search.gpu_model`) measuring ``rounds`` rounds (the
        space's ``measure.repeats`` when None). In rounds mode each round is a draw, and with
        ``consult`` the server measures up to the rule's cap while ``consult`` says go on."""
        from benchmarks.search.problem import runs

        if self.rounds:
            return self._draw_rounds(params, rounds=rounds, consult=consult)
        key = config_key(params)
        n = self.counts.get(key, 0)
        self.counts[key] = n + 1
        truth = self.problem.truth(params)
        is_baseline = not self.problem.space.is_speculative(params)
        gpu_time = server_times(self.problem, params).record(
            rounds if rounds is not None else int(self.problem.space.measure.repeats))
        if not runs(truth):
            # The kind, as a trial reports it (Failure): out of memory is read from the reason,
            # which quotes the server's log.
            oom = is_oom_log(str(truth.get("reason") or ""))
            return TrialResult(status=Status.FAILED, reason=truth.get("reason"), params=dict(params),
                               is_baseline=is_baseline, feasible=False,
                               failure=(Failure.OOM if oom else Failure.CRASH_AT_START).value,
                               gpu_time=gpu_time)
        m = self.problem.evaluator.draw(params, truth, seed=self.seed, n=n, noise_cv=self.noise_cv)
        hist = m.get("histogram")
        return TrialResult(status=Status.OK, reason=None, params=dict(params), is_baseline=is_baseline,
                           output_tok_s=m["tok_s"], accept_length=m.get("accept_length"),
                           phases=m["phases"],
                           records=[{"spec": {_HIST: hist}}] if hist is not None else [], gpu_time=gpu_time)

    def _draw_rounds(self, params: Mapping[str, Any], *, rounds: int | None,
                     consult: Callable[[list[float]], bool] | None) -> TrialResult:
        """One server measuring in rounds (see the module's text)."""
        from benchmarks.search.problem import runs

        key = config_key(params)
        truth = self.problem.truth(params)
        is_baseline = not self.problem.space.is_speculative(params)
        times = server_times(self.problem, params)
        fixed = rounds if rounds is not None else int(self.problem.space.measure.repeats)
        if not runs(truth):
            self.counts[key] = self.counts.get(key, 0) + 1
            oom = is_oom_log(str(truth.get("reason") or ""))
            return TrialResult(status=Status.FAILED, reason=truth.get("reason"), params=dict(params),
                               is_baseline=is_baseline, feasible=False,
                               failure=(Failure.OOM if oom else Failure.CRASH_AT_START).value,
                               gpu_time=times.record(0))
        cap = self.rule.max_rounds if consult is not None and self.rule is not None else fixed
        draws: list[dict[str, Any]] = []
        while len(draws) < cap:
            n = self.counts.get(key, 0)
            self.counts[key] = n + 1
            draws.append(self.problem.evaluator.draw(params, truth, seed=self.seed, n=n,
                                                     noise_cv=self.noise_cv))
            if consult is not None and not consult([d["tok_s"] for d in draws]):
                break
        tok = [float(d["tok_s"]) for d in draws]
        median = statistics.median(tok)
        # Phase times move with the reported tok/s, as each draw's moved with its own.
        first = draws[0]
        phases = {k: (v * first["tok_s"] / median if isinstance(v, (int, float)) else None)
                  for k, v in (first.get("phases") or {}).items()}
        hists = [d["histogram"] for d in draws if d.get("histogram") is not None]
        hist = [sum(col) for col in zip(*hists, strict=True)] if hists else None
        accept = first.get("accept_length")
        if hist is not None and sum(hist):
            accept = 1.0 + sum(j * h for j, h in enumerate(hist)) / sum(hist)
        return TrialResult(status=Status.OK, reason=None, params=dict(params), is_baseline=is_baseline,
                           output_tok_s=median, output_tok_s_repeats=tok, accept_length=accept,
                           phases=phases, records=[{"spec": {_HIST: hist}}] if hist is not None else [],
                           gpu_time=times.record(len(draws)))

    def _consult(self, baseline_tok_s: float | None) -> tuple[Callable[[list[float]], bool] | None,
                                                              dict[str, Any]]:
        """What the search's trial asks after each round (:func:`decide`, as
        ``MeasuringEvaluator`` asks it), and the record it keeps; None when trials measure a
        fixed count (no rule, no incumbent source, or an objective the rounds do not give)."""
        if not self.rounds:
            return None, {}
        space = self.problem.space
        return round_consultant(rule=self.rule, incumbent=self.incumbent, metric=space.objective.metric,
                                maximize=space.objective.direction == "maximize", baseline_tok_s=baseline_tok_s)

    def has_baseline(self, params: Mapping[str, Any]) -> bool:
        """Whether the group of ``params`` has run its baseline."""
        return self._group(params) in self.baselines

    def _group(self, params: Mapping[str, Any]) -> tuple:
        return config_key(self.problem.space.baseline_params(dict(params)))

    def __call__(self, params: Mapping[str, Any], *, name: str = "trial",
                 fresh_baseline: bool = False) -> Evaluation:
        """Draw one config (and its group's baseline when needed) and judge it."""
        from benchmarks.search.problem import min_speedup

        space = self.problem.space
        base_params = space.baseline_params(dict(params))
        gkey = config_key(base_params)
        label = repr(gkey)
        # A fresh baseline is the finalists' confirmation: both servers measure its repeats.
        rounds = int(space.search.finalist_repeats) if fresh_baseline else int(space.measure.repeats)
        if not space.is_speculative(params):
            stored = self.baselines.get(gkey)
            if stored is not None and not fresh_baseline and not self.rounds:
                return Evaluation(result=stored, baseline=None, baseline_key=label)
            # In rounds mode a baseline trial is a server of its own, measured as a trial is.
            result = judge(self._server(base_params, rounds=rounds, fresh=fresh_baseline), None)
            self.baselines.setdefault(gkey, result)
            return Evaluation(result=result, baseline=None, baseline_key=label)
        measured: TrialResult | None = None
        baseline = None if fresh_baseline else self.baselines.get(gkey)
        if baseline is None:
            # Measured ahead of the config as it would be as a trial of its own (in rounds).
            baseline = measured = judge(self._server(base_params, rounds=rounds, fresh=fresh_baseline), None)
            self.baselines.setdefault(gkey, baseline)
        drawn = self._server(params, rounds=rounds, fresh=fresh_baseline, baseline_tok_s=baseline.output_tok_s)
        result = judge(drawn, baseline, min_speedup=min_speedup(space))
        return Evaluation(result=result, baseline=measured, baseline_key=label)

    def _server(self, params: Mapping[str, Any], *, rounds: int, fresh: bool,
                baseline_tok_s: float | None = None) -> TrialResult:
        """One server, not judged: in rounds against the incumbent (a speedup over
        ``baseline_tok_s``), or, ``fresh`` (the finalists' confirmation), a fixed ``rounds``."""
        consult, seen = self._consult(baseline_tok_s) if not fresh else (None, {})
        return self._sequential(self.draw(params, rounds=rounds, consult=consult), seen)

    def _sequential(self, result: TrialResult, seen: Mapping[str, Any]) -> TrialResult:
        """The result with how its rounds ended, as the search's trial records it."""
        if seen and self.rule is not None:
            result.sequential = {**seen, **self.rule.to_dict()}
        return result
