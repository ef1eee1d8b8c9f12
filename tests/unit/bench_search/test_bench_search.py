"""python -m autotune.bench_search: output shape, counting rules and determinism, on tiny spaces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.search.command import render
from benchmarks.search.problem import Oracle, load_problem
from benchmarks.search.strategies import STRATEGIES, _quantile, benchmark

ROOT = Path(__file__).resolve().parents[3]

TINY = """\
name: tiny
backend: sim
profile: {profile}
model_path: sim/target
draft_model_path: sim/draft
fixed_args:
  speculative_algorithm: EAGLE3
  mem_fraction_static: 0.85
parameters:
  tp_size: {{type: categorical, choices: {tps}}}
  speculative_num_steps: {{type: int, low: 1, high: 4}}
  speculative_eagle_topk: {{type: categorical, choices: [1, 4]}}
  speculative_num_draft_tokens: {{type: int, low: 2, high: 10, step: 4}}
workload: {{source: builtin, num_prompts: 4, warmup_prompts: 1, output_len: 96, concurrency: 1,
           seed: 0}}
"""


def tiny(tmp_path: Path, *, profile: str = "llama-3.1-8b-eagle3-h100", tps: str = "[1, 2]") -> str:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY.format(profile=profile, tps=tps))
    return str(path)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.bench_search", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=180, check=False)


def test_cli_json_has_every_strategy_with_medians_or_none(tmp_path):
    space = tiny(tmp_path)
    proc = run_cli("--space", space, "--seeds", "3", "--budget", "12", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == list(STRATEGIES)
    problem = load_problem(space)
    for s in out.values():
        assert len(s["trials_to_target"]) == 3
        for hit in s["trials_to_target"]:
            assert hit is None or 1 <= hit <= 12
        reached = [h for h in s["trials_to_target"] if h is not None]
        assert s["success_rate"] == pytest.approx(len(reached) / 3)
        for key in ("median", "p90"):
            assert s[key] is None or isinstance(s[key], (int, float))
        if s["median"] is not None:
            assert min(reached) <= s["median"] <= max(reached)
        assert s["configs"] == len(problem.configs)
        assert s["optimum_tok_s"] == pytest.approx(problem.optimum)
        assert s["target_tok_s"] == pytest.approx(0.98 * problem.optimum)
        assert s["mean_baselines"] >= 1
    assert out["grid"]["grid_size"] == len(problem.configs)
    assert len(out["grid"]["unbudgeted_trials_to_target"]) == 3
    ours = out["phase-model"]["median"]
    for s in out.values():
        if ours is not None and s["median"] is not None:
            assert s["ratio_ours_to_this"] == pytest.approx(ours / s["median"])
        else:
            assert s["ratio_ours_to_this"] is None


def test_same_seeds_same_result_and_text_report(tmp_path):
    space = tiny(tmp_path)
    a = benchmark(space, seeds=2, budget=10, strategies=["tpe", "phase-model"])
    b = benchmark(space, seeds=2, budget=10, strategies=["tpe", "phase-model"])
    for name in a:
        assert a[name]["trials_to_target"] == b[name]["trials_to_target"]
    text = render(a)
    assert "phase-model" in text and "tpe" in text and "optimum" in text


def test_baselines_count_as_trials_and_failures_are_never_picked(tmp_path):
    # Kimi's weights do not fit on TP 2: every TP 2 run fails at start-up.
    problem = load_problem(tiny(tmp_path, profile="kimi-k2.5-eagle3-tp8", tps="[4, 8]"))
    oracle = Oracle(problem, seed=0, noise_cv=0.02)
    tp4 = next(c for c in problem.configs if c["tp_size"] == 4)
    out = oracle.run(tp4)
    assert oracle.trials == 2 and oracle.baselines == 1 and oracle.failed == 2
    assert out.constraints["failed"] == 1.0 and out.attrs["status"] == "failed"
    assert out.objective is None  # unknown, never a made-up 0 tok/s
    assert out.attrs["baseline_status"] == "failed"
    assert oracle.success_at is None

    tp8 = [c for c in problem.configs if c["tp_size"] == 8]
    oracle.run(tp8[0])
    assert oracle.trials == 4 and oracle.baselines == 2
    out = oracle.run(tp8[1])
    assert oracle.trials == 5 and oracle.baselines == 2  # the group's baseline is reused
    attrs = out.attrs
    assert attrs["baseline_tok_s"] > 0 and attrs["baseline_decode_step_ms"] > 0
    assert attrs["accept_length"] >= 1
    hist = attrs["spec_correct_drafts_histogram"]
    assert sum(hist) > 0
    mean = 1 + sum(j * h for j, h in enumerate(hist)) / sum(hist)
    assert attrs["accept_length"] == pytest.approx(mean)
    phases = attrs["phases"]
    assert phases["cycle_ms"] == pytest.approx(
        phases["draft_ms"] + phases["verify_ms"] + phases["extend_ms"] + phases["other_ms"])
    assert (out.constraints["break_even"] <= 0) == (attrs["status"] == "feasible")


def test_noise_is_common_across_strategies_and_repeats_differ(tmp_path):
    problem = load_problem(tiny(tmp_path))
    cfg = problem.configs[3]
    a, b = Oracle(problem, seed=5, noise_cv=0.02), Oracle(problem, seed=5, noise_cv=0.02)
    first = a.run(cfg).objective
    assert b.run(cfg).objective == first
    again = a.run(cfg).objective
    assert again != first and a.duplicates == 1
    c = Oracle(problem, seed=6, noise_cv=0.02)
    assert c.run(cfg).objective != first
    exact = Oracle(problem, seed=5, noise_cv=0.0).run(cfg).objective
    assert exact == pytest.approx(problem.truth(cfg)["output_tok_s"])


def test_no_phase_data_reports_only_the_verdict(tmp_path):
    problem = load_problem(tiny(tmp_path))
    out = Oracle(problem, seed=0, noise_cv=0.02, phase_data=False).run(problem.configs[0])
    assert "phases" not in out.attrs and "accept_length" not in out.attrs
    assert out.attrs["output_tok_s"] > 0


def test_quantiles_treat_misses_as_unreached():
    assert _quantile([3, 5, 7], 0.5) == 5
    assert _quantile([3, None, 7], 0.5) == 7
    assert _quantile([3, None, None], 0.5) is None
    assert _quantile([2, 4, 6, 8, 10, 12, 14, 16, 18, None], 0.9) is None
    assert _quantile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 0.9) == pytest.approx(10.0)


def test_bad_arguments_exit_2(tmp_path):
    space = tiny(tmp_path)
    proc = run_cli("--space", space, "--noise", "-1")
    assert proc.returncode == 2 and "noise" in proc.stderr
    proc = run_cli("--space", space, "--strategies", "tpe,nope")
    assert proc.returncode == 2 and "nope" in proc.stderr
    proc = run_cli("--space", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2 and "error" in proc.stderr
