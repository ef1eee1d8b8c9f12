"""The incumbent a trial measures against (search.incumbent) and the winner's evidence at the end of a
search (search.evidence): a round's report is never a result, the incumbent file round-trips, and the
finalists are skipped only where the trials' readings separate the winner."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.search.conclude import margin_facts
from autotune.search.evidence import finalist_evidence, standing_evidence, trial_evidence
from autotune.search.incumbent import IncumbentFile, incumbent_of
from autotune.search.trial_report import TrialEntry, TrialReport, round_metrics
from autotune.trial.result import TrialResult
from tests.conftest import SMALL_SPACE


def _result(tok_s: list[float], *, steps: int = 3, status: str = "feasible", baseline_tok_s: float = 50.0,
            is_baseline: bool = False) -> TrialResult:
    median = sorted(tok_s)[len(tok_s) // 2]
    return TrialResult(status=status, reason=None, params={"speculative_num_steps": steps},
                       is_baseline=is_baseline, output_tok_s=median, output_tok_s_repeats=list(tok_s),
                       baseline_tok_s=None if is_baseline else baseline_tok_s,
                       speedup=None if is_baseline else median / baseline_tok_s,
                       feasible=status == "feasible")


def _entry(trial_id: str, result: TrialResult, key: str = "g") -> TrialEntry:
    report = TrialReport(objective=result.output_tok_s, constraints={"failed": 0.0}, result=result,
                         baseline_key=key)
    return TrialEntry(trial_id, dict(result.params), report)


def _without_repeats() -> dict[str, Any]:
    data = copy.deepcopy(SMALL_SPACE)
    data["measure"] = {"startup_timeout_s": 60}
    return data


@pytest.fixture
def space(space_factory: Any) -> Any:
    return space_factory(_without_repeats(), measure={"sequential": {"min_rounds": 2, "max_rounds": 4}})


def test_a_round_report_is_never_read_as_a_result() -> None:
    metrics = round_metrics(number=2, readings=[10.0, 14.0], decision="continue")
    assert metrics == {"objective": 12.0, "round_objective": 12.0, "round": 2, "decision": "continue", "final": False,
                       "stopped_result": None}
    assert TrialReport.from_metrics(metrics) is None
    # After the trial's last round (its own rule ended it) the scheduler has nothing to compare.
    assert "round_objective" not in round_metrics(number=3, readings=[10.0, 14.0, 12.0], decision="stop-cap")
    final = TrialReport(objective=1.0, constraints={"failed": 0.0}).to_metrics()
    assert final["final"] is True and TrialReport.from_metrics(final) is not None


def test_the_incumbent_is_the_best_feasible_trial_with_the_others_noise(space: Any, tmp_path: Path) -> None:
    entries = [_entry("a", _result([100.0, 102.0])), _entry("b", _result([120.0, 118.0, 121.0], steps=5)),
               _entry("c", _result([200.0, 210.0], steps=7, status="infeasible"))]
    found = incumbent_of(space, entries)
    assert found is not None and found.label == "b" and found.readings == (120.0, 118.0, 121.0)
    # The pooled noise counts the other measured trials (a and c: one degree of freedom each).
    assert found.noise[1] == 2 and found.noise[0] > 0
    store = IncumbentFile(tmp_path / "incumbent.json")
    assert store.read() is None  # no file: no incumbent
    assert store.update(space, entries) == found and store.read() == found
    assert store.update(space, entries[2:]) is None and store.read() is None  # none feasible: removed
    (tmp_path / "incumbent.json").write_text("{torn")
    assert store.read() is None


def test_separated_evidence_is_decisive_and_close_evidence_is_not(space: Any) -> None:
    base = _result([50.0, 50.5, 49.6], is_baseline=True)
    clear = [_entry("a", _result([100.0, 101.0, 99.5])), _entry("b", _result([80.0, 81.0], steps=5))]
    ev = trial_evidence(space, clear, {"g": base}.get)
    assert ev is not None and ev.decisive and ev.source == "trials" and ev.rounds == (3, 2)
    assert ev.winner == {"speculative_num_steps": 3} and ev.runner_up == {"speculative_num_steps": 5}
    assert ev.over_runner_up is not None and ev.over_runner_up.separated
    assert "margin over the runner-up (num_steps=5): +" in ev.line() and "at 95%, separated" in ev.line()
    # On the search run in MLflow: the margin with its interval, and the runner-up by its parameters.
    metrics, tags = margin_facts(ev.to_dict())
    assert tags == {"autotune.winner_margin": ev.line(), "autotune.winner_separated": "true",
                    "autotune.runner_up": "steps=5"}
    assert 1 < metrics["winner_margin_low"] < metrics["winner_margin"] < metrics["winner_margin_high"]
    close = [_entry("a", _result([100.0, 103.0, 98.0])), _entry("b", _result([99.0, 101.5], steps=5))]
    ev = trial_evidence(space, close, {"g": base}.get)
    assert ev is not None and not ev.decisive and "NOT separated" in ev.line()
    # Without the group's baseline readings break-even is unknown: never decisive.
    ev = trial_evidence(space, clear, {}.get)
    assert ev is not None and ev.over_break_even is None and not ev.decisive
    assert trial_evidence(space, [_entry("x", _result([1.0, 1.0], status="failed"))], {}.get) is None


def test_one_reading_each_gives_no_interval_and_never_within_the_noise(space: Any) -> None:
    base = _result([50.0], is_baseline=True)
    ev = trial_evidence(space, [_entry("a", _result([101.6])), _entry("b", _result([100.0], steps=5))],
                        {"g": base}.get)
    assert ev is not None and ev.over_runner_up is not None and ev.over_runner_up.low is None
    assert not ev.decisive
    assert ev.line().startswith("margin over the runner-up (num_steps=5): +1.6%, no interval: too few "
                                "readings to tell it from the noise")
    assert "within the noise" not in ev.line() and "[?" not in ev.line()


def test_the_margin_after_a_re_measurement_uses_the_finalists_readings(space: Any) -> None:
    fresh = _result([50.0, 50.2], is_baseline=True)
    ev = finalist_evidence(space, [({"speculative_num_steps": 3}, _result([90.0, 91.0]), fresh),
                                   ({"speculative_num_steps": 5}, _result([95.0, 96.0], steps=5), fresh)])
    assert ev is not None and ev.source == "finalists" and ev.winner == {"speculative_num_steps": 5}
    assert ev.to_dict()["line"] == ev.line() and ev.to_dict()["decisive"] == ev.decisive


def test_a_runner_up_that_did_not_hold_up_when_re_measured_is_never_the_stated_margin(space: Any) -> None:
    base, fresh = _result([50.0, 50.5, 49.6], is_baseline=True), _result([50.0, 50.2], is_baseline=True)
    a, b, c = ({"speculative_num_steps": n} for n in (3, 5, 7))
    trials = trial_evidence(space, [_entry("a", _result([100.0, 106.0])), _entry("b", _result([97.0, 104.0], steps=5)),
                                    _entry("c", _result([80.0, 80.5], steps=7))], {"g": base}.get)
    assert trials is not None and trials.winner == a and trials.runner_up == b and not trials.decisive

    # Both re-measured, b no longer feasible: the trials' comparison with b is superseded.
    held = finalist_evidence(space, [(a, _result([98.0, 99.0]), fresh),
                                     (b, _result([49.0, 49.5], steps=5, status="infeasible"), fresh)])
    assert held is not None and held.runner_up is None
    ev = standing_evidence(trials, held, remeasured=[a, b])
    assert ev is not None and ev.source == "finalists" and ev.runner_up is None and ev.others_fell
    assert ev.line().startswith("no other finalist held up when re-measured")
    assert ev.to_dict()["others_fell"] is True
    # The trials' best fell and the runner-up held: the finalists' evidence, with its own runner-up gone.
    flipped = finalist_evidence(space, [(a, _result([40.0, 41.0], status="infeasible"), fresh),
                                        (b, _result([98.0, 97.0], steps=5), fresh)])
    assert flipped is not None and flipped.winner == b
    ev = standing_evidence(trials, flipped, remeasured=[a, b])
    assert ev is not None and ev.winner == b and ev.others_fell
    # One finalist re-measured (the runner-up was not): the trials' comparison still stands.
    alone = finalist_evidence(space, [(a, _result([98.0, 99.0]), fresh)])
    assert standing_evidence(trials, alone, remeasured=[a]) is trials
    # Both held up: the finalists' comparison replaces the trials'.
    both = finalist_evidence(space, [(a, _result([98.0, 99.0]), fresh), (c, _result([79.0, 80.0], steps=7), fresh)])
    assert both is not None and standing_evidence(trials, both, remeasured=[a, c]) is both
    # Nothing held up: the trials' evidence is left (the winner is then a baseline; no margin is shown).
    assert standing_evidence(trials, None, remeasured=[a, b]) is trials
    assert standing_evidence(None, held, remeasured=[a, b]) is held


@pytest.mark.parametrize(("section", "message"), [
    ({"sequential": {"min_rounds": 1}}, "measure.sequential.min_rounds"),
    ({"sequential": {"min_rounds": 3, "max_rounds": 2}}, "measure.sequential.max_rounds"),
    ({"sequential": {"confidence": 1.5}}, "between 0.5 and 1"),
    ({"sequential": {"rounds": 3}}, "rounds"),
])
def test_a_bad_sequential_section_names_its_field(space_factory: Any, section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        space_factory(_without_repeats(), measure=section)


def test_sequential_is_the_default_unless_the_space_writes_repeats(space_factory: Any) -> None:
    assert space_factory(measure={"repeats": 2}).measure.sequential is None
    assert space_factory(measure={"repeats": 2, "sequential": True}).measure.sequential is not None
    assert space_factory(_without_repeats(), measure={"sequential": False}).measure.sequential is None
    on = space_factory(_without_repeats()).measure.sequential
    assert on is not None and (on.min_rounds, on.max_rounds, on.confidence) == (2, 6, 0.95)


def test_the_trials_evidence_settles_only_when_decisive_in_rounds_without_load_levels(space: Any) -> None:
    from autotune.search.evidence import settles

    def base(key: str) -> TrialResult:
        return _result([50.0, 50.5, 49.5], is_baseline=True)

    clear = trial_evidence(space, [_entry("a", _result([100.0, 101.0, 99.0])),
                                   _entry("b", _result([70.0, 70.5, 69.5], steps=5))], base)
    close = trial_evidence(space, [_entry("a", _result([100.0, 104.0, 96.0])),
                                   _entry("b", _result([99.0, 103.0, 95.0], steps=5))], base)
    assert clear is not None and clear.decisive and close is not None and not close.decisive
    assert settles(clear, rounds=True, levels=False)
    assert not settles(close, rounds=True, levels=False)
    assert not settles(clear, rounds=False, levels=False)  # fixed repeats: the finalists confirm
    assert not settles(clear, rounds=True, levels=True)  # per-level answers are the finalists'
    assert not settles(None, rounds=True, levels=False)


def test_a_runner_up_at_most_equivalence_pct_ahead_settles_and_one_that_may_be_further_does_not(
        space_factory: Any) -> None:
    def base(key: str) -> TrialResult:
        return _result([50.0, 50.1, 49.9], is_baseline=True)

    tight = [_entry("a", _result([100.0, 100.3, 99.8, 100.1])),
             _entry("b", _result([99.9, 100.2, 99.7, 100.0], steps=5))]
    loose = [_entry("a", _result([100.0, 104.0, 96.0])), _entry("b", _result([99.0, 103.0, 95.0], steps=5))]
    sequential = {"sequential": {"min_rounds": 2, "max_rounds": 4}}
    default = space_factory(_without_repeats(), measure=sequential)
    assert default.search.equivalence_pct == 2.0
    ev = trial_evidence(default, tight, base)
    assert ev is not None and ev.over_runner_up is not None and not ev.over_runner_up.separated
    assert ev.over_runner_up.low is not None and ev.over_runner_up.low >= 0.98
    assert ev.equivalent and ev.decisive
    assert "not separated, but the runner-up is at most 2.0% ahead" in ev.line()
    assert ev.to_dict()["equivalent"] is True and ev.to_dict()["equivalence"] == 0.02
    # The same readings when the space asks for a separated winner: the finalists confirm.
    strict = space_factory(_without_repeats(), measure=sequential, search={"equivalence_pct": 0})
    ev = trial_evidence(strict, tight, base)
    assert ev is not None and not ev.equivalent and not ev.decisive and "NOT separated" in ev.line()
    # A runner-up that may be more than 2% ahead is not settled, whatever the point estimate.
    ev = trial_evidence(default, loose, base)
    assert ev is not None and ev.over_runner_up is not None and ev.over_runner_up.low is not None
    assert ev.over_runner_up.low < 0.98 and not ev.equivalent and not ev.decisive


@pytest.mark.parametrize(("value", "message"), [
    (-1, "search.equivalence_pct.*must be >= 0"),
    (11, "search.equivalence_pct.*at most 10"),
    ("two", "search.equivalence_pct.*finite number"),
])
def test_a_bad_equivalence_pct_names_its_field(space_factory: Any, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        space_factory(search={"equivalence_pct": value})


def test_each_load_level_has_its_own_incumbent(space: Any, tmp_path: Path) -> None:
    from autotune.trial.level_results import LoadLevel, level_record

    c1, c8 = LoadLevel.of("concurrency", 1), LoadLevel.of("concurrency", 8)

    def at_levels(trial: str, c1_tok: list[float], c8_tok: list[float], steps: int) -> TrialEntry:
        one, eight = _result(c1_tok, steps=steps), _result(c8_tok, steps=steps)
        primary = _result(c1_tok, steps=steps)
        primary.levels = [level_record(c1, one), level_record(c8, eight)]
        return _entry(trial, primary)

    # "a" is best at c1 (the primary), "b" at c8: each level's incumbent is its own best.
    entries = [at_levels("a", [120.0, 121.0], [300.0, 302.0], 3), at_levels("b", [100.0, 101.0], [400.0, 398.0], 5)]
    store = IncumbentFile(tmp_path / "incumbent.json")
    primary = store.update(space, entries)
    assert primary is not None and primary.label == "a" and store.read() == primary
    at_c8 = store.read_level(c8)
    assert at_c8 is not None and at_c8.label == "b" and at_c8.readings == (400.0, 398.0)
    assert at_c8.noise[1] == 1  # the other config's readings at c8
    assert store.read_level(c1) is not None and store.read_level(c1).label == "a"
    assert store.read_level(LoadLevel.of("concurrency", 64)) is None  # a level nobody measured
    # Infeasible everywhere: no incumbent at any level, and the file is gone.
    gone = [at_levels("c", [1.0, 1.0], [1.0, 1.0], 7)]
    gone[0].report.result.status = "infeasible"
    for record in gone[0].report.result.levels:
        record["status"] = "infeasible"
    assert store.update(space, gone) is None and store.read_level(c8) is None
    assert not (tmp_path / "incumbent.json").exists()
