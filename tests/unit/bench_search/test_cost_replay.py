"""bench_search's cost-per-answer replay: the search's whole path through the product's own
functions (trial.sequential.decide, search.evidence.trial_evidence, search.stopping.check),
every server's rounds counted by gpu_time.count."""

from __future__ import annotations

from typing import Any

import pytest

import autotune.trial.sequential as sequential
from autotune.search import evidence as product_evidence
from autotune.search import stopping
from autotune.trial.gpu_time import FINALISTS, count, events_of
from autotune.trial.sequential import Decision, Evidence, SequentialRule
from benchmarks.search import cost_replay, drawn
from benchmarks.search.command import main
from benchmarks.search.cost_replay import ProductRun, replay, rule_of
from benchmarks.search.drawn import DrawnEvaluator
from benchmarks.search.problem import load_problem
from tests.unit.bench_search.test_bench_search import ROOT

LANDSCAPE = str(ROOT / "benchmarks" / "landscapes" / "recorded-h200-llama-8b-4x768.json")
RULE = SequentialRule(min_rounds=2, max_rounds=6, confidence=0.95)


@pytest.fixture(scope="module")
def problem() -> Any:
    return load_problem(landscape=LANDSCAPE)


def _slowest(problem: Any) -> dict[str, Any]:
    """The speculative config with the lowest recorded tok/s (clearly behind the optimum)."""
    spec = [c for c in problem.configs if problem.space.is_speculative(c)]
    return min(spec, key=lambda c: problem.truth(c)["output_tok_s"])


def _incumbent_at(problem: Any, params: dict[str, Any]) -> Evidence:
    """The config's own recorded repeats as the incumbent's readings."""
    e = problem.evaluator.landscape.entry(params)
    return Evidence(readings=tuple(e.repeats), label="optimum")


def test_the_replay_imports_the_products_functions_not_copies() -> None:
    # The replay's rounds consult through the product's round_consultant, which asks decide.
    assert drawn.round_consultant is sequential.round_consultant
    assert cost_replay.trial_evidence is product_evidence.trial_evidence
    assert cost_replay.settles is product_evidence.settles
    assert cost_replay.check is stopping.check and cost_replay.study_noise is stopping.study_noise


def test_every_round_of_a_trial_asks_decide_and_fixed_repeats_never_do(problem, monkeypatch) -> None:
    calls: list[int] = []
    real = sequential.decide

    def counting(readings: Any, **kwargs: Any) -> Decision:
        calls.append(len(readings))
        return real(readings, **kwargs)

    monkeypatch.setattr(sequential, "decide", counting)
    run = replay(problem, seed=0, budget=8, noise_cv=0.0, sequential=True, stop_rule=True)
    assert calls, "the sequential replay never asked decide"
    # One call a round of every server that measured in rounds: the trials' and the baselines
    # measured ahead of them (by the same rule, as MeasuringEvaluator measures them).
    assert run.baseline_rounds and len(calls) == sum(run.rounds) + sum(run.baseline_rounds)
    assert min(calls) == 1 and max(calls) <= RULE.max_rounds
    calls.clear()
    today = replay(problem, seed=0, budget=8, noise_cv=0.0, sequential=False, stop_rule=False)
    assert calls == [] and set(today.rounds) == {int(problem.space.measure.repeats)}
    assert set(today.baseline_rounds) == {int(problem.space.measure.repeats)}
    assert today.trials == 8 and not today.stopped and not today.settled


def test_a_trial_stopped_worse_counts_fewer_rounds_and_fewer_gpu_seconds(problem) -> None:
    slow, best = _slowest(problem), problem.optimum_params
    incumbent = _incumbent_at(problem, best)
    ev = DrawnEvaluator(problem, seed=0, noise_cv=0.0, rounds=True, rule=RULE, incumbent=lambda: incumbent)
    worse = ev(slow).result
    assert worse.sequential is not None and worse.sequential["decision"] == Decision.STOP_WORSE.value
    assert len(worse.output_tok_s_repeats) == RULE.min_rounds
    # The same config measured today's fixed repeats, on a fresh stream.
    fixed = DrawnEvaluator(problem, seed=0, noise_cv=0.0, rounds=True)(slow).result
    assert fixed.sequential is None and len(fixed.output_tok_s_repeats) == problem.space.measure.repeats
    assert worse.gpu_time is not None and fixed.gpu_time is not None
    assert worse.gpu_time.measure_s < fixed.gpu_time.measure_s
    assert count(events_of(worse.gpu_time, "trials")).gpu_s < count(events_of(fixed.gpu_time, "trials")).gpu_s
    # A config level with the incumbent is close: it measures to the cap.
    close = DrawnEvaluator(problem, seed=0, noise_cv=0.0, rounds=True, rule=RULE, incumbent=lambda: incumbent)
    level = close(best).result
    assert level.sequential is not None and level.sequential["decision"] == Decision.STOP_CAP.value
    assert len(level.output_tok_s_repeats) == RULE.max_rounds
    assert level.gpu_time is not None and level.gpu_time.measure_s > fixed.gpu_time.measure_s


def test_finalists_are_re_measured_only_where_the_evidence_is_not_decisive(problem, monkeypatch) -> None:
    asked: list[bool] = []
    real = product_evidence.trial_evidence

    def forced(decisive: bool) -> Any:
        def wrapper(space: Any, entries: Any, baseline_of: Any) -> Any:
            found = real(space, entries, baseline_of)
            asked.append(True)
            assert found is not None  # a speculative trial is feasible on this landscape

            class Forced:
                pass

            out = Forced()
            out.decisive = decisive  # type: ignore[attr-defined]
            return out
        return wrapper

    monkeypatch.setattr(cost_replay, "trial_evidence", forced(False))
    unsettled = replay(problem, seed=0, budget=8, noise_cv=0.0, sequential=True, stop_rule=True)
    monkeypatch.setattr(cost_replay, "trial_evidence", forced(True))
    settled = replay(problem, seed=0, budget=8, noise_cv=0.0, sequential=True, stop_rule=True)
    assert len(asked) == 2
    assert settled.settled and not unsettled.settled
    # Same trials (same seed, same rule); the conclusion adds one finalist and its fresh baseline.
    assert unsettled.trials == settled.trials
    assert unsettled.servers == settled.servers + 2 * max(1, problem.space.search.finalists)
    assert unsettled.gpu_s > settled.gpu_s


def test_the_conclusions_servers_are_finalist_events(problem) -> None:
    from benchmarks.search.conclusion import conclude

    run = ProductRun(problem, seed=0, noise_cv=0.0, rule=None)
    run.run(problem.optimum_params)  # its group's baseline first, then the config
    assert count(run.spent).servers == {"baselines": 1, "trials": 1, FINALISTS: 0}
    end = conclude(run, finalists=1)
    assert {e.stage for e in end.spent} == {FINALISTS}
    assert count(end.spent).servers[FINALISTS] == 2  # the finalist and its fresh baseline
    settled = conclude(run, finalists=1, settled=True)
    assert settled.spent == () and settled.runs == 0 and settled.winner == end.winner


def test_the_rule_is_the_spaces_or_the_schemas_default(problem) -> None:
    import dataclasses

    # The recorded GPU space measures in rounds with the schema's default rule.
    assert problem.space.measure.sequential is not None
    assert rule_of(problem.space) == RULE
    # A space that writes measure.repeats turns rounds off in a search; the product default's row
    # still replays the schema's default rule.
    fixed = dataclasses.replace(problem.space, measure=dataclasses.replace(problem.space.measure, sequential=None))
    assert fixed.measure.sequential is None and rule_of(fixed) == RULE


def test_the_command_prints_the_rows_and_the_sweep(capsys) -> None:
    assert main(["--landscape", LANDSCAPE, "--seeds", "2", "--cost-per-answer"]) == 0
    out = capsys.readouterr().out
    assert "phase-model, stop rule + sequential" in out and "phase-model, full budget, fixed repeats" in out
    assert "best peer:" in out and "\nsweep" in out
    assert main(["--landscape", LANDSCAPE, "--cost-per-answer", "--noise", "0.01"]) == 2
