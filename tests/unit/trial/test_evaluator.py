"""The evaluator seam (issue 32): every evaluator returns a judged result, and the one break-even
rule (autotune.trial.verdict.pays) decides alike wherever a speedup is judged: a tie at
min_speedup is infeasible everywhere, a speedup just above it pays everywhere."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.search.trainable import constraint_values
from autotune.space.search_space import load_space
from autotune.space.trial_config import config_key
from autotune.trial.evaluator import Evaluation, Evaluator, MeasuringEvaluator
from autotune.trial.measure_settings import settings_for
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.verdict import break_even_margin, judge, pays
from benchmarks.search.conclusion import conclude as bench_conclude
from benchmarks.search.drawn import DrawnEvaluator
from benchmarks.search.families import record
from benchmarks.search.problem import Oracle, load_problem
from tests.unit.bench_search.test_bench_search import ROOT, tiny

SPEC = {"tp_size": 1, "speculative_num_steps": 3, "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 10}
BASE_TOK = 100.0
#: A tie, and a step above it, for min_speedup 1.0 (the families round speedups to 5 decimals).
TIE, ABOVE = 100.0, 100.0 * (1 + 1e-4)


def test_the_rule_and_its_constraint_agree_at_and_around_the_tie() -> None:
    for m in (1.0, 1.05):
        assert not pays(m, min_speedup=m) and break_even_margin(m, min_speedup=m) == pytest.approx(1e-9)
        assert pays(m + 1e-12, min_speedup=m) and break_even_margin(m + 1e-12, min_speedup=m) <= 0
        assert break_even_margin(m + 0.5, min_speedup=m) == pytest.approx(m - (m + 0.5) + 1e-9)
        assert break_even_margin(None, min_speedup=m) == 1.0 and not pays(None, min_speedup=m)


# ---- the three evaluators -------------------------------------------------------------------

def _measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec_tok: float) -> MeasuringEvaluator:
    """The server path with the server left out: measure() reads fixed tok/s."""
    import autotune.trial.evaluator as evaluator_mod
    import autotune.trial.measure as measure_mod

    def fake_measure(config: Any, workload: Any, settings: Any, *, name: str = "") -> TrialResult:
        return TrialResult(status=Status.OK, reason=None, params={}, is_baseline=config.is_baseline,
                           output_tok_s=BASE_TOK if config.is_baseline else spec_tok)

    monkeypatch.setattr(evaluator_mod, "measure", fake_measure)
    monkeypatch.setattr(measure_mod, "measure", fake_measure)
    space = load_space(tiny(tmp_path, tps="[1]"))
    return MeasuringEvaluator(space=space, baseline_dir=str(tmp_path / "baselines"),
                              settings=settings_for(space))


class Fixed:
    """A problem's source whose every draw reads a fixed tok/s (the baseline's, or the config's)."""

    def __init__(self, inner: Any, space: Any, spec_tok: float) -> None:
        self.inner, self.space, self.spec_tok = inner, space, spec_tok

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def draw(self, params: Any, truth: Any, *, seed: int, n: int, noise_cv: float) -> dict[str, Any]:
        out = self.inner.draw(params, truth, seed=seed, n=n, noise_cv=0.0)
        out["tok_s"] = self.spec_tok if self.space.is_speculative(params) else BASE_TOK
        return out


def _drawn(problem: Any, spec_tok: float) -> Any:
    problem.evaluator = Fixed(problem.evaluator, problem.space, spec_tok)
    return problem


@pytest.fixture(scope="module")
def model_problem(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_problem(tiny(tmp_path_factory.mktemp("model"), tps="[1]"))


@pytest.fixture(scope="module")
def landscape_problem() -> Any:
    return load_problem(landscape=str(ROOT / "benchmarks" / "landscapes" / "recorded-h200-llama-8b.json"))


def _spec_of(problem: Any) -> dict[str, Any]:
    return next(c for c in problem.configs if problem.space.is_speculative(c))


def test_every_evaluator_returns_a_judged_result(tmp_path, monkeypatch, model_problem, landscape_problem):
    evaluators: list[tuple[Evaluator, dict[str, Any]]] = [
        (_measuring(tmp_path, monkeypatch, 150.0), SPEC),
        (DrawnEvaluator(model_problem, seed=0, noise_cv=0.02), _spec_of(model_problem)),
        (DrawnEvaluator(landscape_problem, seed=0, noise_cv=0.0), _spec_of(landscape_problem))]
    for evaluator, params in evaluators:
        first = evaluator(params)
        assert isinstance(first, Evaluation)
        # Judged: a verdict, and the baseline it was judged against, measured here the first time.
        assert first.result.status in (Status.FEASIBLE, Status.INFEASIBLE, Status.FAILED)
        assert first.result.feasible is not None and first.baseline is not None
        assert first.baseline.status == Status.FEASIBLE and first.baseline.is_baseline
        assert first.result.baseline_tok_s == first.baseline.output_tok_s
        assert first.result.speedup == pytest.approx(first.result.output_tok_s / first.baseline.output_tok_s)
        assert evaluator(params).baseline is None  # the group's baseline is reused
        fresh = evaluator(params, name="finalist", fresh_baseline=True)
        assert fresh.baseline is not None and fresh.result.feasible is not None


def test_a_drawn_evaluator_reads_the_oracles_stream(model_problem):
    """The oracle's runs are the evaluator's draws: the same seed, the same reading."""
    oracle = Oracle(model_problem, seed=4, noise_cv=0.05)
    cfg = _spec_of(model_problem)
    report = oracle.run(cfg)
    again = DrawnEvaluator(model_problem, seed=4, noise_cv=0.05)(cfg)
    assert report.objective == again.result.output_tok_s
    assert report.attrs["status"] == again.result.status and report.feasible == again.result.feasible


@pytest.mark.parametrize("spec_tok,want", [(TIE, False), (ABOVE, True)])
def test_the_break_even_rule_decides_alike_everywhere(tmp_path, monkeypatch, model_problem,
                                                      landscape_problem, spec_tok, want):
    """At a tie (speedup == min_speedup == 1.0) every copy says infeasible; just above, feasible."""
    verdicts: dict[str, bool] = {}
    # The server path (trainable, finalists) and its Optuna constraint.
    measuring = _measuring(tmp_path, monkeypatch, spec_tok)
    assert measuring.space.constraints.min_speedup == 1.0
    result = measuring(SPEC).result
    verdicts["judge (server)"] = bool(result.feasible)
    verdicts["optuna constraint"] = constraint_values(result, measuring.space)["break_even"] <= 0
    verdicts["finalist (server)"] = bool(measuring(SPEC, fresh_baseline=True).result.feasible)
    # bench_search: the model-only and landscape evaluators, the oracle's report and constraint,
    # its mean-based pick, and the conclusion's finalists.
    for label, problem in (("model", model_problem), ("landscape", landscape_problem)):
        saved = problem.evaluator
        try:
            _drawn(problem, spec_tok)
            cfg = _spec_of(problem)
            verdicts[f"drawn {label}"] = bool(DrawnEvaluator(problem, seed=0, noise_cv=0.0)(cfg).result.feasible)
            oracle = Oracle(problem, seed=0, noise_cv=0.0, finalists=1)
            report = oracle.run(cfg)
            verdicts[f"oracle {label}"] = report.feasible
            verdicts[f"oracle constraint {label}"] = report.constraints["break_even"] <= 0
            verdicts[f"oracle pick {label}"] = oracle._feasible[config_key(cfg)]
            if report.feasible:
                verdicts[f"conclusion {label}"] = bench_conclude(oracle, finalists=1).finalists[0].held
        finally:
            problem.evaluator = saved
    # The truth's verdict (the optimum), and the synthetic families' records.
    truth = SimpleNamespace(space=model_problem.space, _feasible={},
                            truth=lambda p: {"status": "ok", "output_tok_s": spec_tok if
                                             model_problem.space.is_speculative(p) else BASE_TOK},
                            baseline_truth=lambda p: {"status": "ok", "output_tok_s": BASE_TOK})
    verdicts["problem truth"] = type(model_problem).truly_feasible(truth, SPEC)
    phases = {"cycle_ms": 10.0}
    base_rec = {"output_tok_s": BASE_TOK, "phases": phases}
    rec = record({"tok_s": spec_tok, "accept_length": 2.0, "phases": phases}, SPEC, baseline=base_rec,
                 seed=0, noise_cv=0.0, repeats=1, min_speedup=1.0)
    verdicts["family record"] = rec["status"] == "feasible"
    # judge itself, on a hand-made pair.
    base = judge(TrialResult(status="ok", reason=None, params={}, is_baseline=True, output_tok_s=BASE_TOK), None)
    spec = TrialResult(status="ok", reason=None, params=SPEC, is_baseline=False, output_tok_s=spec_tok)
    verdicts["judge"] = bool(judge(spec, base, min_speedup=1.0).feasible)
    assert verdicts == {k: want for k in verdicts}, verdicts
