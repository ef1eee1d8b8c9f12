"""bench_search's GPU time: each replayed server's times (recorded or modelled) and the counting,
which is the search's own (autotune.trial.gpu_time.count) over the events of a run."""

from __future__ import annotations

import glob
import json
import statistics

import pytest

from autotune.space.trial_config import config_key
from autotune.space.workload import Workload
from autotune.trial.gpu_time import count
from benchmarks.search.gpu_model import (
    MODEL_STARTUP_S,
    MODEL_WARMUP_ROUNDS,
    modelled_times,
    recorded_times,
    server_times,
    sweep_events,
)
from benchmarks.search.problem import Oracle, load_problem
from benchmarks.search.strategies import benchmark
from tests.unit.bench_search.test_bench_conclusion import BEST, SECOND
from tests.unit.bench_search.test_bench_search import ROOT, tiny

RECORDED = sorted(glob.glob(str(ROOT / "benchmarks" / "landscapes" / "recorded-h200-*.json")))


def test_the_model_start_up_is_the_median_of_the_recorded_h200_start_ups() -> None:
    startups = [r["startup_s"] for f in RECORDED for r in json.load(open(f))["records"]]
    assert len(RECORDED) == 4 and len(startups) == 40
    assert MODEL_STARTUP_S == round(statistics.median(startups))


def test_a_record_with_per_repeat_walls_gives_its_round_and_leaves_the_rest_to_warm_up() -> None:
    rec = json.load(open(ROOT / "benchmarks/landscapes/recorded-h200-llama-8b-4x768.json"))["records"][0]
    t = recorded_times(rec, gpus=1)
    assert t is not None and t.source == "recorded"
    walls = [r["wall_s"] for r in rec["repeat_breakdown"]]
    assert t.startup_s == rec["startup_s"] and t.round_s == statistics.median(walls)
    # Its warm-up became stable: the product now keeps that stable pass as round 1, so the replay
    # pays one pass less of the record's warm-up (autotune.trial.level_measure).
    assert rec["warmup_stable"] is True and len(rec["warmup_tok_s"]) >= 2
    one = statistics.median(walls)
    assert t.warmup_s == pytest.approx(rec["duration_s"] - rec["startup_s"] - 3 * one - one)
    assert t.teardown_s is None  # not recorded on the H200: unknown, not counted
    g = t.record(3)
    assert g.wall_s == pytest.approx(rec["duration_s"] - one)  # start-up, warm-up, 3 rounds, one pass less
    unstable = recorded_times({**rec, "warmup_stable": False}, gpus=1)
    assert unstable is not None and unstable.record(3).wall_s == pytest.approx(rec["duration_s"])


def test_a_record_without_walls_derives_its_round_from_the_passes_it_ran() -> None:
    rec = json.load(open(ROOT / "benchmarks/landscapes/recorded-h200-llama-8b.json"))["records"][0]
    assert not rec.get("repeat_breakdown")
    t = recorded_times(rec, gpus=2)
    assert t is not None and t.source == "derived" and t.round_s is not None
    passes = len(rec["warmup_tok_s"]) + len(rec["output_tok_s_repeats"])
    assert t.round_s * passes == pytest.approx(rec["duration_s"] - rec["startup_s"])
    kept = t.round_s if rec.get("warmup_stable") is True else 0.0  # the stable pass is round 1 now
    assert t.record(3).gpu_s == pytest.approx(2 * (rec["duration_s"] - kept))
    assert recorded_times({**rec, "startup_s": None}, gpus=1) is None  # then the model speaks


def test_the_model_rounds_are_the_workload_at_the_config_tok_s_and_a_failure_pays_start_up(tmp_path) -> None:
    problem = load_problem(tiny(tmp_path, tps="[1]"))
    wl = problem.space.workload
    tok_s = problem.truth(BEST)["output_tok_s"]
    t = server_times(problem, BEST)
    assert t.source == "model" and t.startup_s == MODEL_STARTUP_S
    assert t.round_s == pytest.approx(wl["num_prompts"] * wl["output_len"] / tok_s)
    assert t.warmup_s == pytest.approx(MODEL_WARMUP_ROUNDS * t.round_s)
    failed = modelled_times(problem.space, {**BEST, "tp_size": 4}, None).record(3)
    assert failed.gpus == 4 and failed.startup_s == MODEL_STARTUP_S
    assert failed.warmup_s is None and failed.measure_s is None


def test_an_unwritten_num_prompts_is_modelled_as_the_search_would_run_it(tmp_path) -> None:
    """A space that leaves num_prompts out: bench_search's rounds and its histogram counts use the
    requests the product's workload sends (6 waves of concurrency 16 = 96), not a fixed 8."""
    text = open(tiny(tmp_path, tps="[1]")).read().replace("num_prompts: 4, ", "").replace(
        "concurrency: 1,", "concurrency: 16,")
    path = tmp_path / "sized.yaml"
    path.write_text(text)
    problem = load_problem(str(path))
    wl = problem.space.workload
    assert "num_prompts" not in wl
    runs = Workload.from_spec(wl).num_prompts
    assert runs == 96
    tok_s = problem.truth(BEST)["output_tok_s"]
    assert server_times(problem, BEST).round_s == pytest.approx(runs * wl["output_len"] / tok_s)
    assert problem.evaluator.requests == runs * int(problem.space.measure.repeats)


def test_a_run_costs_its_servers_and_its_confirmation_by_the_one_count(tmp_path) -> None:
    problem = load_problem(tiny(tmp_path, tps="[1]"))
    space = problem.space
    oracle = Oracle(problem, seed=0, noise_cv=0.0, finalists=1)
    oracle.run(SECOND)  # its group's baseline, then 3-4-10
    oracle.run(BEST)  # the optimum: the conclusion confirms it and the run succeeds
    assert oracle.success_at is not None and oracle.gpu_at_success is not None
    repeats, fin = int(space.measure.repeats), int(space.search.finalist_repeats)
    base = space.baseline_params(BEST)

    def cost(params, rounds):
        return server_times(problem, params).record(rounds).gpu_s

    expected = (cost(base, repeats) + cost(SECOND, repeats) + cost(BEST, repeats)  # the trials
                + cost(base, fin) + cost(BEST, fin))  # the finalist and its fresh baseline
    got = oracle.gpu_at_success
    assert got.gpu_s == pytest.approx(expected)
    assert got.servers == {"trials": 2, "baselines": 1, "finalists": 2}
    assert got.by_stage["finalists"] == pytest.approx(cost(base, fin) + cost(BEST, fin))
    assert count(oracle.spent).gpu_s == pytest.approx(expected - got.by_stage["finalists"])


def test_the_sweep_measures_every_config_and_each_baseline_once(tmp_path) -> None:
    problem = load_problem(tiny(tmp_path))
    totals = count(sweep_events(problem))
    servers = {config_key(p): p for c in problem.configs for p in (c, problem.space.baseline_params(c))}
    assert sum(totals.servers.values()) == len(servers)
    assert totals.servers["baselines"] == problem.groups
    repeats = int(problem.space.measure.repeats)
    assert totals.gpu_s == pytest.approx(sum(server_times(problem, p).record(repeats).gpu_s
                                             for p in servers.values()))


def test_every_strategy_reports_gpu_seconds_beside_the_sweep(tmp_path) -> None:
    out = benchmark(tiny(tmp_path, tps="[1]"), seeds=3, budget=20, strategies=("grid", "phase-model"),
                    finalists=1)
    for s in out.values():
        assert len(s["gpu_s_to_target"]) == 3
        for trials, gpu_s in zip(s["trials_to_target"], s["gpu_s_to_target"], strict=True):
            assert (trials is None) == (gpu_s is None)
        assert s["sweep_gpu_s"] > 0
        if s["gpu_s_median"] is not None:
            assert s["gpu_s_p10"] <= s["gpu_s_median"] <= s["gpu_s_p90"]
            assert s["gpu_s_median_of_sweep"] == pytest.approx(s["gpu_s_median"] / s["sweep_gpu_s"])
