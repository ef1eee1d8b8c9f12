"""bench_search's replay of the search's stop rule (benchmarks.search.stop_replay, --stop-rule).

On a recorded real landscape: asking the rule must not change what the sampler proposes (so the
"full budget" row is the same run), the replay stops where the search's own function says so, and
the command prints both rows and refuses bad input with exit 2.
"""

from __future__ import annotations

import json

import optuna
import pytest

from autotune.search.samplers import make_sampler
from autotune.search.stopping import check
from benchmarks.search.problem import Oracle, load_problem
from benchmarks.search.stop_replay import rule_noise, run_with_stop_rule
from tests.unit.bench_search.test_bench_search import ROOT, run_cli

LANDSCAPE = str(ROOT / "benchmarks" / "landscapes" / "recorded-h200-llama-8b.json")


def _proposals(*, ask_the_rule: bool, trials: int) -> list[dict]:
    problem = load_problem(None, landscape=LANDSCAPE)
    sampler = make_sampler("phase-model", seed=1, space=problem.space)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial(problem.warm_start.asked)
    oracle = Oracle(problem, seed=1, noise_cv=0.0)
    out = []
    for _ in range(trials):
        if ask_the_rule:
            check(sampler, study, sampler_name="phase-model", noise=0.01, trials=oracle.trials,
                  budget=trials)
        trial = study.ask()
        params = problem.space.suggest(trial)
        out.append(dict(params))
        oracle.run(params).tell(study, trial, maximize=True)
    return out


def test_asking_the_rule_does_not_move_the_sampler() -> None:
    assert _proposals(ask_the_rule=True, trials=8) == _proposals(ask_the_rule=False, trials=8)


def test_the_replay_stops_where_the_rule_says_and_runs_on_for_the_full_budget() -> None:
    problem = load_problem(None, landscape=LANDSCAPE)
    noise = rule_noise(problem, 0.0)
    assert noise is not None and 0 < noise < 0.05  # the file's recorded repeats, measured
    run = run_with_stop_rule(problem, "phase-model", seed=0, budget=12, noise_cv=0.0,
                             rule_noise_cv=noise)
    assert run.stopped_at is not None and run.stopped_at < 12
    assert run.stop_reason.startswith(f"stopped after {run.stopped_at} of 12 trials: ")
    assert run.full_trials >= 12
    # TPE gives no bound: the rule never stops it, and says why.
    tpe = run_with_stop_rule(problem, "tpe", seed=0, budget=6, noise_cv=0.0, rule_noise_cv=noise)
    assert tpe.stopped_at is None
    assert tpe.stop_reason.startswith("the stop rule does not apply to sampler tpe")
    assert tpe.stopped_success == tpe.full_success


@pytest.mark.slow  # 3 s: the command in subprocesses (make test-fast leaves it out)
def test_the_command_prints_both_rows_and_refuses_noise_on_a_landscape() -> None:
    proc = run_cli("--landscape", LANDSCAPE, "--seeds", "2", "--budget", "10", "--stop-rule",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["strategy"] == "phase-model" and data["seeds"] == 2
    assert len(data["stop_rule"]["trials"]) == 2 and len(data["full_budget"]["trials"]) == 2
    assert all(t <= f for t, f in zip(data["stop_rule"]["trials"], data["full_budget"]["trials"],
                                      strict=True))
    text = run_cli("--landscape", LANDSCAPE, "--seeds", "2", "--budget", "10", "--stop-rule")
    assert text.returncode == 0, text.stderr
    rows = [line.split()[0:2] for line in text.stdout.splitlines()
            if line.startswith(("stop rule ", "full budget "))]
    assert rows == [["stop", "rule"], ["full", "budget"]]
    bad = run_cli("--landscape", LANDSCAPE, "--noise", "0.01", "--stop-rule")
    assert bad.returncode == 2 and "--noise does not apply" in bad.stderr
