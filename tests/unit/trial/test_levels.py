"""Per-concurrency answers, unit by unit: level records, the verdict per level, the winner policy
per level, the per-level answers of a search, and SGLang's adaptive per-batch-size table (read back
by SGLang's own loader where it is installed). The emulator-backed ends are
``test_trial_integration.py::test_concurrency_levels_...`` and
``test_search.py::test_concurrency_levels_...``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import LaunchArgsError
from autotune.export.level_exports import _same_server
from autotune.launch.spec import LaunchSpec
from autotune.search.level_answers import Measured, level_answers, level_finalists
from autotune.sglang import adaptive
from autotune.sglang.flags import sglang_importable
from autotune.space.workload import Workload
from autotune.trial.level_results import concurrencies, level_record, level_result, with_levels
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.verdict import judge
from autotune.trial.winner import Contender as Candidate
from autotune.trial.winner import pick_per_level


def measured(tok_s: float | None, *, baseline: bool = False, status: str = Status.OK,
             params: dict | None = None) -> TrialResult:
    return TrialResult(status=status, reason=None if tok_s else "failed", is_baseline=baseline,
                       params=params if params is not None else ({} if baseline else {"steps": 3}),
                       output_tok_s=tok_s, phases={"cycle_ms": 10.0})


def at_levels(by_level: dict[int, float | None], primary: int, **kw) -> TrialResult:
    wl = Workload.from_spec({"concurrency": list(by_level), "primary_concurrency": primary,
                             "num_prompts": 2})
    per = [(c, measured(v, status=Status.OK if v else Status.FAILED, **kw)) for c, v in by_level.items()]
    return with_levels(per, wl)


def test_a_single_level_result_is_returned_as_it_is() -> None:
    one = measured(100.0)
    assert with_levels([(8, one)], Workload.from_spec({"concurrency": 8, "num_prompts": 2})) is one
    assert one.levels is None and concurrencies(one) == []


def test_the_result_is_the_primary_level_with_every_level_recorded() -> None:
    r = at_levels({1: 50.0, 8: 300.0}, primary=8)
    assert r.output_tok_s == 300.0 and concurrencies(r) == [1, 8]
    assert level_result(r, 1).output_tok_s == 50.0 and level_result(r, 1).levels is None
    assert level_result(r, 64) is None
    assert level_record(1, level_result(r, 1))["concurrency"] == 1


def test_each_level_is_judged_against_the_baselines_same_level() -> None:
    base = judge(at_levels({1: 40.0, 8: 250.0}, primary=8, baseline=True), None)
    spec = judge(at_levels({1: 60.0, 8: 200.0}, primary=8), base)
    at = {lv["concurrency"]: lv for lv in spec.levels}
    # Speculation pays at 1 (60 against 40) and loses at 8 (200 against 250).
    assert at[1]["status"] == Status.FEASIBLE and at[1]["speedup"] == pytest.approx(1.5)
    assert at[8]["status"] == Status.INFEASIBLE and at[8]["speedup"] == pytest.approx(0.8)
    assert at[1]["baseline_tok_s"] == 40.0 and at[8]["baseline_tok_s"] == 250.0
    # The trial's own verdict is its primary level's, the one Optuna is told.
    assert spec.status == Status.INFEASIBLE and spec.speedup == pytest.approx(0.8)
    assert all(lv["status"] == Status.FEASIBLE for lv in base.levels)


def test_a_level_the_baseline_lacks_or_failed_never_looks_good() -> None:
    base = judge(at_levels({1: None, 8: 250.0}, primary=8, baseline=True), None)
    spec = judge(at_levels({1: 60.0, 8: 300.0}, primary=8), base)
    at = {lv["concurrency"]: lv for lv in spec.levels}
    assert at[1]["status"] == Status.INFEASIBLE and "baseline unknown" in at[1]["reason"]
    assert at[1]["speedup"] is None  # unknown, never 0
    other = judge(at_levels({1: 60.0, 4: 300.0}, primary=4), base)
    assert "no measurement at concurrency 4" in other.levels[1]["reason"]
    assert other.levels[1]["status"] == Status.INFEASIBLE


def test_the_winner_policy_applies_per_level() -> None:
    cands = {1: [Candidate("long", 80.0, False, True), Candidate("base", 40.0, True, True)],
             8: [Candidate("long", 200.0, False, False), Candidate("base", 250.0, True, True)],
             64: [Candidate("long", None, False, False)]}
    picks = pick_per_level([1, 8, 64], lambda lv: cands[lv], maximize=True)
    assert picks[1].ref == "long" and not picks[1].is_baseline
    assert picks[8].ref == "base" and picks[8].is_baseline
    assert picks[64] is None


def test_search_answers_and_finalists_per_level() -> None:
    base = judge(at_levels({1: 40.0, 8: 250.0}, primary=8, baseline=True), None)
    short = judge(at_levels({1: 60.0, 8: 300.0}, primary=8, params={"steps": 1}), base)
    long = judge(at_levels({1: 90.0, 8: 260.0}, primary=8, params={"steps": 7}), base)
    # The primary level's finalist is the short chain; the long one is best at 1, so it joins.
    assert level_finalists([("short", short), ("long", long)], [1, 8], 8, metric="output_tok_s",
                           maximize=True, chosen=["short"]) == ["long"]
    rows = level_answers([Measured("b", base, "trial"), Measured("s", short, "trial"),
                          Measured("l", long, "trial")], [1, 8], metric="output_tok_s",
                         maximize=True)
    assert [(r["concurrency"], r["winner"]) for r in rows] == [(1, "l"), (8, "s")]
    assert rows[0]["params"] == {"steps": 7} and rows[0]["speedup"] == pytest.approx(90 / 40)
    assert rows[0]["break_even_accept_length"] is not None and rows[1]["confirmed"] is False


def test_no_feasible_config_at_a_level_is_said_so() -> None:
    base = judge(at_levels({1: None, 8: 250.0}, primary=8, baseline=True), None)
    rows = level_answers([Measured("b", base, "trial")], [1, 8], metric="output_tok_s", maximize=True)
    assert rows[0]["winner"] is None and rows[0]["output_tok_s"] is None
    assert rows[1]["winner"] == "b" and rows[1]["is_baseline"] is True


# ---- SGLang's adaptive per-batch-size table ------------------------------------------------------

def test_the_adaptive_table_pins_one_step_count_per_batch_size(tmp_path: Path) -> None:
    table = adaptive.adaptive_table({8: 1, 1: 5, 64: 0})
    assert table == {"1": {"candidate_steps": [5]}, "8": {"candidate_steps": [1]},
                     "64": {"candidate_steps": [0]}}
    path = tmp_path / "a.json"
    path.write_text(json.dumps(table))
    steps, checker = adaptive.check_table(path)
    assert steps == [0, 1, 5]
    assert checker.startswith("SGLang ") if sglang_importable() else "mirror" in checker
    with pytest.raises(ValueError, match="int >= 0"):
        adaptive.adaptive_table({1: -1})


@pytest.mark.skipif(not sglang_importable(), reason="SGLang's own loader is the point here")
@pytest.mark.parametrize("text, needle", [
    ('{"1": {"candidate_steps": []}}', "candidate_steps"),
    ('{"1": {"candidate_steps": [-1]}}', "non-negative"),
    ('{"low": {"candidate_steps": [1]}}', "at least one integer-string"),
])
def test_sglangs_loader_rejects_a_bad_table(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "a.json"
    path.write_text(text)
    with pytest.raises(LaunchArgsError, match=needle):
        adaptive.check_table(path)
    with pytest.raises(LaunchArgsError):  # the mirror agrees
        adaptive._mirror_steps(path)


@pytest.mark.parametrize("args, needle", [
    ({"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1}, None),
    ({"speculative_algorithm": "NGRAM"}, "only EAGLE, EAGLE3"),
    ({"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 4}, "topk 1"),
    ({"speculative_algorithm": "EAGLE", "enable_two_batch_overlap": True}, "enable_two_batch_overlap"),
])
def test_which_launches_can_adapt(args: dict, needle: str | None) -> None:
    why = adaptive.unsupported(args)
    assert (why is None) if needle is None else (needle in why)


def test_one_adaptive_server_needs_the_same_non_speculative_settings() -> None:
    def launch(steps: int | None, tp: int = 1) -> LaunchSpec:
        spec_args = {} if steps is None else {"speculative_algorithm": "EAGLE3",
                                              "speculative_num_steps": steps}
        return LaunchSpec(model_path="m", draft_model_path=None if steps is None else "d",
                          server_args={"tp_size": tp, **spec_args}, env={})
    _same_server(launch(3), {1: launch(3), 8: launch(1), 64: launch(None)}, [1, 8, 64])
    with pytest.raises(LaunchArgsError, match=r"concurrency 8's winner differs .*\(tp_size\)"):
        _same_server(launch(3), {1: launch(3), 8: launch(1, tp=2)}, [1, 8])


def test_the_trial_table_lists_every_level_after_the_primarys_figures() -> None:
    from autotune.trial.report import phase_table

    base = judge(at_levels({1: 40.0, 8: 250.0}, primary=8, baseline=True), None)
    text = phase_table(judge(at_levels({1: 60.0, 8: 200.0}, primary=8), base))
    assert "Speedup:         0.800x" in text
    assert "At concurrency 1: 60.0 tok/s, baseline 40.0, speedup 1.500x" in text
    assert text.splitlines()[-1].startswith("At concurrency 8: 200.0 tok/s") and "infeasible" in text
