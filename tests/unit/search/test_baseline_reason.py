"""Why the baseline won, said as the winner policy decided it: a speculative config that was fast in
its trial but crashed when re-measured is not reported as one that "did not beat its baseline"."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from autotune.search.conclude import Finalist, conclude, report_finalist
from autotune.search.console import print_summary
from autotune.search.trial_report import TrialEntry, TrialReport
from autotune.trial.outcome import Failure, Status
from autotune.trial.result import TrialResult
from autotune.trial.winner import BASELINE_BETTER, NO_FINALIST_HELD, NONE_BEAT

SPEC = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}
PLAIN = {"speculative_algorithm": None}


def _spec(tok_s: float | None, *, status: Status, reason: str | None = None) -> TrialResult:
    ok = tok_s is not None
    return TrialResult(status=status, reason=reason, params=dict(SPEC), is_baseline=False, output_tok_s=tok_s,
                       baseline_tok_s=100.0 if ok else None, speedup=tok_s / 100.0 if tok_s else None,
                       feasible=status == Status.FEASIBLE,
                       failure=None if ok else Failure.CRASH_AT_START.value)


def _base(tok_s: float) -> TrialResult:
    return TrialResult(status=Status.FEASIBLE, reason=None, params=dict(PLAIN), is_baseline=True,
                       output_tok_s=tok_s, speedup=1.0, feasible=True)


def _entry(trial_id: str, result: TrialResult) -> TrialEntry:
    return TrialEntry(trial_id, dict(result.params),
                      TrialReport(objective=result.output_tok_s, constraints={"failed": 0.0}, result=result,
                                  baseline_key="g"))


def _told(space: Any, tmp_path: Path, entries: list[TrialEntry], finalists: list[Finalist]) -> tuple[Any, str]:
    outcome = conclude(space, entries, finalists, [], name="t", interrupted=False, exp_dir=tmp_path,
                       overheads=[])
    out = io.StringIO()
    print_summary(outcome, out=out)
    return outcome, out.getvalue()


def test_finalists_that_crash_when_re_measured_are_said_to_have_crashed(space_factory: Any, tmp_path: Path) -> None:
    space = space_factory()
    trial = _entry("fast", _spec(150.0, status=Status.FEASIBLE))
    crashed = _spec(None, status=Status.FAILED, reason="crashed at start-up (exit code 1)")
    outcome, text = _told(space, tmp_path, [trial], [Finalist(trial, crashed, _base(101.0))])
    assert outcome.baseline_wins and outcome.winner_why == NO_FINALIST_HELD
    line = "No finalist held up when re-measured (1 failed: crashed at start-up (exit code 1))"
    assert outcome.baseline_line() == line
    assert f"{line}. The winner is the BASELINE" in text
    assert f"{line}: **serve without speculative decoding**." in outcome.report_files["summary.md"]
    assert outcome.summary()["winner_why"] == NO_FINALIST_HELD
    assert "beat its no-speculation baseline" not in text


def test_each_reason_of_the_policy_has_its_own_line(space_factory: Any, tmp_path: Path) -> None:
    space = space_factory()
    # No speculative config was feasible in its trial.
    slow = _entry("slow", _spec(90.0, status=Status.INFEASIBLE))
    outcome, text = _told(space, tmp_path, [slow, _entry("b", _base(100.0))], [])
    assert outcome.winner_why == NONE_BEAT
    assert "No speculative config beat its no-speculation baseline. The winner is the BASELINE" in text
    # A feasible speculative config, and another group's baseline faster still.
    fast = _entry("fast", _spec(120.0, status=Status.FEASIBLE))
    outcome, text = _told(space, tmp_path, [fast, _entry("b", _base(130.0))], [])
    assert outcome.winner_why == BASELINE_BETTER
    assert ("A no-speculation baseline is better than every feasible speculative config. "
            "The winner is the BASELINE") in text
    # A speculative winner: no baseline line at all.
    outcome, text = _told(space, tmp_path, [fast, _entry("b", _base(100.0))], [])
    assert not outcome.baseline_wins and "The winner is the BASELINE" not in text
    assert outcome.winner_why is not None and "speculative config" in outcome.winner_why


def test_a_finalist_line_says_why_it_failed_or_did_not_hold_up() -> None:
    trial = _entry("fast", _spec(150.0, status=Status.FEASIBLE))
    out = io.StringIO()
    crashed = _spec(None, status=Status.FAILED, reason="crashed at start-up (exit code 1)")
    report_finalist(Finalist(trial, crashed, _base(101.0)), tracker=None, out=out)
    slower = _spec(99.0, status=Status.INFEASIBLE, reason="does not beat the baseline (speedup 0.990x, needs > 1x)")
    report_finalist(Finalist(trial, slower, _base(100.0)), tracker=None, out=out)
    held = _spec(140.0, status=Status.FEASIBLE)
    report_finalist(Finalist(trial, held, _base(100.0)), tracker=None, out=out)
    assert out.getvalue().splitlines() == [
        "  finalist fast: search 150.0 tok/s -> failed when re-measured: crashed at start-up (exit code 1)",
        "  finalist fast: search 150.0 tok/s -> confirmed 99.0 tok/s, speedup 0.990x, infeasible: does not beat "
        "the baseline (speedup 0.990x, needs > 1x)",
        "  finalist fast: search 150.0 tok/s -> confirmed 140.0 tok/s, speedup 1.400x, feasible"]
