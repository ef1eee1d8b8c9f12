"""What a trial reports to Ray and Optuna, and when a stored baseline is reused."""

from __future__ import annotations

from pathlib import Path

from autotune.search.trainable import constraint_values, report_of, sampler_attrs
from autotune.space.search_space import load_space
from autotune.trial.baselines import FileBaselineStore
from autotune.trial.baselines import reusable_baseline as _reusable
from autotune.trial.outcome import Failure
from autotune.trial.result import TrialResult
from autotune.trial.verdict import judge

DEMO = Path(__file__).resolve().parents[3] / "search_spaces" / "demo.yaml"


def result(**kw) -> TrialResult:
    base = dict(status="ok", reason=None, params={"speculative_num_steps": 2}, is_baseline=False,
                output_tok_s=100.0, phases={"cycle_ms": 20.0, "draft_ms": 1.0, "verify_ms": 18.0,
                                            "extend_ms": 0.5, "other_ms": 0.5})
    base.update(kw)
    return TrialResult(**base)


def test_transient_baseline_failure_is_retried_once(tmp_path):
    store = FileBaselineStore(tmp_path)
    # The kind decides, not the words: this reason reads like an OOM, the kind says timeout.
    timeout = result(status="failed", reason="start-up timeout (it ran out of memory last time)",
                     failure=Failure.STARTUP_TIMEOUT.value, is_baseline=True, output_tok_s=None)
    store.put("g", timeout)
    assert _reusable(store, "g") is None
    store.put("g", timeout)
    assert _reusable(store, "g").status == "failed"


def test_deterministic_baseline_failure_is_final(tmp_path):
    store = FileBaselineStore(tmp_path)
    for key, kind in (("g", Failure.OOM), ("c", Failure.CRASH_AT_START), ("b", Failure.BAD_CONFIG)):
        store.put(key, result(status="failed", reason="whatever the words", failure=kind.value,
                              is_baseline=True, output_tok_s=None))
        assert _reusable(store, key).status == "failed"
    # No kind recorded (a store written before the field existed): worth one retry.
    store.put("old", result(status="failed", reason="out of memory at start-up", is_baseline=True,
                            output_tok_s=None))
    assert _reusable(store, "old") is None
    ok = judge(result(is_baseline=True), None)
    store.put("h", ok)
    assert _reusable(store, "h").output_tok_s == 100.0


def test_constraints_feasible_infeasible_failed():
    space = load_space(DEMO)
    base = judge(result(is_baseline=True, output_tok_s=90.0), None)
    win = judge(result(output_tok_s=99.0), base)
    lose = judge(result(output_tok_s=80.0), base)
    tie = judge(result(output_tok_s=90.0), base)
    crash = judge(result(status="failed", reason="crashed", output_tok_s=None), base)
    c = {name: constraint_values(r, space) for name, r in
         (("win", win), ("lose", lose), ("tie", tie), ("crash", crash), ("base", base))}
    assert all(v <= 0 for v in c["win"].values())
    assert all(v <= 0 for v in c["base"].values())
    assert c["lose"]["break_even"] > 0 and c["lose"]["failed"] == 0
    assert c["tie"]["break_even"] > 0  # a tie is not a win
    assert c["crash"]["failed"] > 0 and c["crash"]["break_even"] > 0


def test_report_never_turns_unknown_into_zero():
    space = load_space(DEMO)
    base = judge(result(is_baseline=True, output_tok_s=90.0), None)
    crash = judge(result(status="failed", reason="crashed", output_tok_s=None, phases=None), base)
    rep = report_of(crash, space, baseline=None, baseline_key="g")
    assert rep.objective is None
    assert rep.output_tok_s is None and rep.speedup is None
    attrs = sampler_attrs(crash)
    assert attrs["baseline_status"] == "feasible"
    assert attrs["failure"] is None  # unknown kind stays unknown
    oom = judge(result(status="failed", reason="out of memory", output_tok_s=None, failure="oom"), base)
    assert sampler_attrs(oom)["failure"] == "oom"  # the kind reaches the samplers
    assert attrs["phases"]["cycle_ms"] is None
    assert rep.feasible is False and rep.to_metrics()["feasible"] is False



def test_the_verdict_and_optunas_constraint_agree_on_every_slo_bound(tmp_path):
    # One SLO check (trial.slo_margin) for both: at a strict bound's equality they disagreed
    # (the verdict said violated, Optuna's constraint of 0.0 said met).
    base = judge(result(is_baseline=True, output_tok_s=90.0), None)
    for op, limit, value, met in (("<", 100.0, 100.0, False), ("<=", 100.0, 100.0, True),
                                  (">", 2.0, 2.0, False), (">=", 2.0, 2.0, True),
                                  ("<=", 100.0, 101.0, False), (">=", 2.0, 2.5, True)):
        metric, field = (("p99_ttft_ms", "ttft_ms_p99") if limit == 100.0
                         else ("accept_length", "accept_length"))
        text = DEMO.read_text().replace("constraints: {min_speedup: 1.0}",
                                        f'constraints: {{min_speedup: 1.0, slos: ["{metric} {op} {limit}"]}}')
        assert "slos" in text, "demo.yaml's constraints line changed"
        path = tmp_path / "space.yaml"
        path.write_text(text)
        space = load_space(path)
        judged = judge(result(output_tok_s=99.0, **{field: value}), base, slos=[(metric, op, limit)])
        constraint = constraint_values(judged, space)["slo_0"]
        assert (judged.feasible is True) == met, (op, limit, value, judged.reason)
        assert (constraint <= 0) == met, (op, limit, value, constraint)
