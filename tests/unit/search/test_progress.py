"""The search's live progress: per-trial time, "trial k of N" with an ETA, and the heartbeat."""

from __future__ import annotations

import io
import threading
import time

import pytest

from autotune.search.progress import Heartbeat, ProgressTable, clock, eta_line
from autotune.search.trial_report import TrialReport
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult


def _report(tok_s: float) -> TrialReport:
    result = TrialResult(status=Status.FEASIBLE, reason=None, is_baseline=False, feasible=True,
                         output_tok_s=tok_s, speedup=1.1,
                         params={"speculative_num_steps": 2})
    return TrialReport(objective=tok_s, constraints={}, result=result)


def test_clock_reads_as_people_read_durations() -> None:
    assert [clock(s) for s in (None, -1.0, 4.4, 59.6, 185.0, 3725.0)] == ["-", "-", "4s", "1m00s", "3m05s", "1h02m"]


def test_no_eta_before_the_second_trial_nor_after_the_last() -> None:
    assert eta_line(done=1, total=10, since_start_s=20.0, trial_times=[20.0]) is None
    assert eta_line(done=10, total=10, since_start_s=200.0, trial_times=[20.0] * 10) is None


def test_the_eta_is_the_pace_so_far_times_the_trials_left() -> None:
    line = eta_line(done=2, total=10, since_start_s=30.0, trial_times=[14.0, 16.0])
    assert line is not None
    # 15 s a trial so far, 8 left: 2m00s; the median trial time beside it.
    assert "trial 2 of 10 done in 30s, 15s a trial (median); ETA 2m00s for the other 8" in line
    assert "the stop rule may end sooner" in line


def test_a_resumed_search_paces_on_its_own_trials_only() -> None:
    # 5 finished before the resume, 2 in this session's 40 s: 20 s each, 3 left.
    line = eta_line(done=7, total=10, since_start_s=40.0, trial_times=[20.0, 20.0], done_here=2)
    assert line is not None and "trial 7 of 10" in line and "ETA 1m00s for the other 3" in line
    assert eta_line(done=6, total=10, since_start_s=40.0, trial_times=[20.0], done_here=1) is None


def test_rows_give_each_trials_time_and_from_the_second_an_eta() -> None:
    out = io.StringIO()
    table = ProgressTable(out, total=4)
    table.begin()
    table.row(trial="t1", params={"speculative_num_steps": 2}, report=_report(100.0), elapsed_s=12.0)
    first = out.getvalue()
    assert "time" in first.splitlines()[0] and first.splitlines()[2].rstrip().endswith("12s")
    assert "ETA" not in first
    table.row(trial="t2", params={"speculative_num_steps": 3}, report=_report(110.0), elapsed_s=None)
    lines = out.getvalue().splitlines()
    assert lines[3].rstrip().endswith("-")  # unknown time: "-", never 0
    assert lines[4].startswith("    trial 2 of 4 done in ") and "ETA " in lines[4] and "for the other 2" in lines[4]


def test_an_unknown_best_keeps_the_columns_aligned() -> None:
    out = io.StringIO()
    table = ProgressTable(out)
    failed = TrialReport(objective=None, constraints={"failed": 1.0})
    table.row(trial="t1", params={}, report=failed, elapsed_s=3.0)
    header, _, row = out.getvalue().splitlines()[:3]
    # Every unknown figure is "-" in its column: the row ends where the header does.
    assert len(row) == len(header) and row.endswith("         -      3s"), (header, row)


def test_a_table_without_a_total_gives_no_eta() -> None:
    out = io.StringIO()
    table = ProgressTable(out)
    table.begin()
    for i in range(3):
        table.row(trial=f"t{i}", params={}, report=_report(100.0), elapsed_s=5.0)
    assert "ETA" not in out.getvalue()


class _Lines(io.StringIO):
    """A console that signals each line written."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = threading.Event()

    def write(self, s: str) -> int:
        n = super().write(s)
        if s.strip():
            self.wrote.set()
        return n


def test_the_heartbeat_speaks_after_a_silence() -> None:
    out = _Lines()
    with Heartbeat(out, "re-measuring 2 finalist(s)", every_s=0.2) as beat:
        assert out.wrote.wait(timeout=30), "no heartbeat within 30 s"
    assert beat.beats >= 1
    assert out.getvalue().startswith("  ... still re-measuring 2 finalist(s) (")


def test_the_heartbeat_keeps_quiet_while_the_console_is_busy() -> None:
    out = io.StringIO()
    with Heartbeat(out, "running trials", every_s=0.2, quiet_since=time.monotonic) as beat:
        time.sleep(0.6)
    assert beat.beats == 0 and out.getvalue() == ""


def test_the_heartbeat_needs_a_positive_period() -> None:
    with pytest.raises(ValueError, match="every_s must be > 0"):
        Heartbeat(io.StringIO(), "x", every_s=0)
