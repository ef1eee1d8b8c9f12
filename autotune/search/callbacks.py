"""The Ray Tune callback of a search (progress table, MLflow trial runs, tuner overhead) and its registry.

:class:`SearchCallback` keeps the search's typed :class:`SearchLedger` (trials as
:class:`~autotune.search.trial_report.TrialEntry`); it pickles by reference to this module and is looked
up again in :data:`LIVE_CALLBACKS` (the comment there says why). The class and its registry live
together in one importable module so that whatever runs the search, ``python -m
autotune.search.run`` included, shares one registry. Importing it imports Ray (the callback's
base class): the driver imports it only where it runs a search. Also :func:`errored_report`, how
a trial that errored inside Ray is reported, by the callback and by the driver alike.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.tune import Callback

from autotune.search.incumbent import IncumbentFile
from autotune.search.progress import ProgressTable
from autotune.search.trainable import trial_gpus
from autotune.search.trial_report import TrialEntry, TrialReport

if TYPE_CHECKING:
    import optuna
    from ray.tune import ResultGrid
    from ray.tune.experiment import Trial

    from autotune.search.searcher import ConstrainedOptunaSearch
    from autotune.space.search_space import SearchSpace

from autotune.tracking.interface import SearchTracker
from autotune.trial.outcome import Status


@dataclass
class SearchLedger:
    """What the driver and its callback keep of one running search.

    Attributes:
        space: The space the trials load (a failed trial's row needs it); None when unknown.
        results: Every trial that reported, in the order it completed.
        errored: Trials that errored inside Ray, by trial id.
        overheads: The tuner's overhead of each trial, in seconds (see :class:`SearchCallback`).
        overhead_gpus: The GPUs each of those trials held meanwhile (same order), for the GPU bill.
        started: When each running trial's slot was free (``time.monotonic``), by trial id.
        began: When Ray started each running trial (``time.monotonic``), by trial id: its row's time.
        free: When each slot no running trial holds was freed (a heap).
        freed: Whether any trial has freed its slot yet.
        t0: When the run started (``setup``).
        study: The searcher's Optuna study, when this session made it (not on a resume).
        incumbent: The search's incumbent file, rewritten as each trial completes (trials
            measuring in rounds read it); None when the search keeps none.
        searcher: The searcher itself (its stop rule's decision), likewise.
    """

    space: SearchSpace | None = None
    results: list[TrialEntry] = field(default_factory=list)
    errored: dict[str, TrialEntry] = field(default_factory=dict)
    overheads: list[float] = field(default_factory=list)
    overhead_gpus: list[int] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)
    began: dict[str, float] = field(default_factory=dict)
    free: list[float] = field(default_factory=list)
    freed: bool = False
    t0: float | None = None
    study: optuna.Study | None = None
    incumbent: IncumbentFile | None = None
    searcher: ConstrainedOptunaSearch | None = None


# The live callback of each search running in this process, by experiment directory. Ray Tune
# pickles the run's callbacks into tuner.pkl, and a restored Tuner uses those copies; a callback
# pickles as its key only (SearchCallback.__reduce__), so a resumed search reports through this
# run's table, tracker and ledger (not stale copies), and any ``out`` stream works (an open file
# does not pickle). Only the live object is kept here: everything else is on it.
LIVE_CALLBACKS: dict[str, SearchCallback] = {}


def _callback_from_key(key: str) -> Callback:
    """Unpickle a search callback: the live one of this process, or a no-op if there is none."""
    live = LIVE_CALLBACKS.get(key)
    return live if live is not None else Callback()


def _kind(report: TrialReport) -> str:
    return "baseline" if report.is_baseline else "trial"


class SearchCallback(Callback):
    """The Ray Tune callback that prints progress and tracks trials in MLflow.

    Tuner overhead of a trial: from the moment its slot was free (the previous trial's
    bookkeeping done, or the start of the run) to the end of its own bookkeeping, minus what it
    measured (duration_s of the trial and of a baseline it measured). A clock started at
    on_trial_start would miss the suggestion and the trial process start-up, and one stopped
    before the MLflow logging would miss the bookkeeping.

    Args:
        table: The live progress table.
        tracker: The search's tracker (a ``DurableTracker`` in a search) (never raises), None without tracking.
        ledger: The search's ledger, which the driver reads after ``fit``.
        key: The experiment directory: the key in :data:`LIVE_CALLBACKS`, and where
            ``trial-errors.log`` goes.
    """

    def __init__(self, *, table: ProgressTable, tracker: SearchTracker | None, ledger: SearchLedger,
                 key: str) -> None:
        self.table = table
        self.tracker = tracker
        self.ledger = ledger
        self.key = key

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _callback_from_key, (self.key,)

    def setup(self, stop: Any = None, num_samples: int | None = None,
              total_num_samples: int | None = None, **info: Any) -> None:
        self.ledger.free = []
        self.ledger.t0 = time.monotonic()
        self.table.begin()

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        ledger = self.ledger
        if ledger.free:
            began = heapq.heappop(ledger.free)
        elif not ledger.freed:
            began = ledger.t0 if ledger.t0 is not None else time.monotonic()  # one of the first slots
        else:
            # A slot no earlier trial freed (resources allowed one more trial at once):
            # it was free from now, not from the start of the run.
            began = time.monotonic()
        ledger.started[trial.trial_id] = began
        ledger.began[trial.trial_id] = time.monotonic()

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        tracker = self.tracker
        report = TrialReport.from_metrics(trial.last_result)
        started = self.ledger.started.pop(trial.trial_id, None)
        measured = report.measured_s if report is not None and report.result is not None else None
        if report is not None:
            self.ledger.results.append(TrialEntry(trial.trial_id, dict(trial.config), report))
            if self.ledger.incumbent is not None and self.ledger.space is not None:
                self.ledger.incumbent.update(self.ledger.space, self.ledger.results)
            # Spooled before the row is printed: a result the table shows is kept, even
            # if the driver dies while MLflow is written.
            if tracker is not None:
                if report.baseline is not None:
                    tracker.log_trial(report.baseline_label,
                                      report.baseline, kind="baseline", drain=False)
                if report.result is not None:
                    tracker.log_trial(trial.trial_id, report.result, drain=False, kind=_kind(report))
            self.table.row(trial=trial.trial_id, params=trial.config, report=report,
                           elapsed_s=self._elapsed(trial.trial_id))
            if tracker is not None:
                tracker.drain()
        self._free(started, measured, dict(trial.config or {}))

    def record_unseen(self, entries: list[TrialEntry]) -> None:
        """Record the trials Ray ended without telling the callbacks: its wall-time budget stops
        the running trials directly (``TuneController._stop_experiment_if_needed``), so a trial
        cut off between rounds reaches the driver only through the result grid. Each gets its row
        and its MLflow run, as a trial the callback saw does."""
        seen = {e.trial_id for e in self.ledger.results} | set(self.ledger.errored)
        for entry in entries:
            # Only trials this session started (a resumed search's earlier ones were recorded then).
            if (entry.trial_id in seen or entry.trial_id not in self.ledger.began
                    or entry.report.status != Status.STOPPED):
                continue
            self.ledger.results.append(entry)
            if self.tracker is not None and entry.report.result is not None:
                self.tracker.log_trial(entry.trial_id, entry.report.result, drain=False, kind=_kind(entry.report))
            self.table.row(trial=entry.trial_id, params=entry.params, report=entry.report,
                           elapsed_s=self._elapsed(entry.trial_id))
        if self.tracker is not None:
            self.tracker.drain()

    def _elapsed(self, trial_id: str) -> float | None:
        """The trial's wall time from Ray's start of it to now (None: its start was not seen)."""
        began = self.ledger.began.pop(trial_id, None)
        return None if began is None else time.monotonic() - began

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        # An error inside Ray (the trial process lost, an exception outside the measured
        # trial) is a failed trial like any other: in the table, MLflow and the counts.
        tracker = self.tracker
        self._free(self.ledger.started.pop(trial.trial_id, None), None)
        err = trial.get_error() if hasattr(trial, "get_error") else None
        report = errored_report(self.ledger.space, dict(trial.config or {}), err)
        where = log_error(self.key, f"trial {trial.trial_id}: failed inside Ray", err)
        self.ledger.errored[trial.trial_id] = TrialEntry(trial.trial_id, dict(trial.config or {}), report)
        if tracker is not None and report.result is not None:  # errored_report sets it
            tracker.log_trial(trial.trial_id, report.result, drain=False, kind=_kind(report))
        self.table.row(trial=trial.trial_id, params=trial.config, report=report,
                       elapsed_s=self._elapsed(trial.trial_id))
        print(f"                  (traceback: {where})", file=self.table.out, flush=True)
        if tracker is not None:
            tracker.drain()

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        # Ray runs the trial again (its worker or node was lost): one console line, the
        # traceback in a log, the attempt kept as lost in MLflow; the next attempt's
        # result is logged as the following attempt.
        err = trial.get_error() if hasattr(trial, "get_error") else None
        report = errored_report(self.ledger.space, dict(trial.config or {}), err)
        where = log_error(self.key, f"trial {trial.trial_id}: attempt lost, Ray runs it again", err)
        print(f"  trial {trial.trial_id}: an attempt ended without a result ({_brief(err)}); "
              f"Ray runs it again (details: {where})", file=self.table.out, flush=True)
        if self.tracker is not None:
            self.tracker.log_lost_attempt(trial.trial_id,
                                          ((report.result and report.result.reason) or "") + "; Ray runs it again",
                                          params=dict(trial.config or {}), kind=_kind(report))

    def _free(self, started: float | None, measured: float | None,
              config: dict[str, Any] | None = None) -> None:
        if started is None:
            return
        now = time.monotonic()
        self.ledger.freed = True
        heapq.heappush(self.ledger.free, now)
        if measured is not None:
            self.ledger.overheads.append(max(now - started - measured, 0.0))
            space = self.ledger.space
            fixed = int((space.fixed_args.get("tp_size") if space is not None else None) or 1)
            self.ledger.overhead_gpus.append(trial_gpus(config or {}, fixed_tp=fixed))


#: Where the tracebacks of trials that errored inside Ray go, in the search's run folder; the
#: console gets one line (Ray's own printing is off: ``TUNE_PRINT_ALL_TRIAL_ERRORS=0``).
TRIAL_ERRORS_LOG = "trial-errors.log"


def log_error(exp_dir: str, what: str, error: BaseException | None) -> str:
    """Append ``what`` and ``error``'s traceback to the run folder's error log; returns its path."""
    import traceback
    from pathlib import Path

    path = Path(exp_dir) / TRIAL_ERRORS_LOG
    try:
        with open(path, "a") as fh:
            fh.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {what}\n")
            fh.write("".join(traceback.format_exception(error)) if error is not None else "no error recorded\n")
    except OSError as exc:
        return f"not written: {exc}"
    return str(path)


def _brief(error: BaseException | None) -> str:
    cause = getattr(error, "cause", None) or error
    if cause is None:
        return "no error recorded"
    first = (str(cause).strip().splitlines() or [""])[0]
    return f"{type(cause).__name__}: {first[:120]}" if first else type(cause).__name__


def errored_report(space: SearchSpace | None, config: dict[str, Any], error: BaseException | None) -> TrialReport:
    """A trial that errored inside Ray, as the report it stands in for: a failed result with the
    error as its reason."""
    from autotune.trial.outcome import Failure, Status
    from autotune.trial.result import TrialResult

    cause = getattr(error, "cause", None) or error
    what = f"{type(cause).__name__}: {cause}" if cause is not None else "no error recorded"
    reason = "the trial errored inside Ray: " + " ".join(what.split())[:500]
    is_baseline = False
    if space is not None:
        try:
            is_baseline = bool(space.trial_config(space.coerce_params(config)).is_baseline)
        except Exception:  # noqa: BLE001 - a config the space rejects is still a failed trial
            is_baseline = not config.get("speculative_algorithm")
    result = TrialResult(status=Status.FAILED, reason=reason, params=dict(config), is_baseline=is_baseline,
                         feasible=False, failure=Failure.ERROR.value)
    return TrialReport(objective=None, constraints={"failed": 1.0}, result=result)


def entries_of(grid: ResultGrid, ledger: SearchLedger, space: SearchSpace) -> tuple[list[TrialEntry], int]:
    """Every trial that ended, from Ray's result grid, and how many did not end."""
    entries: list[TrialEntry] = []
    unfinished = 0
    errored = dict(ledger.errored)
    for r in (grid[i] for i in range(len(grid))):  # ResultGrid iterates by index only
        metrics = r.metrics or {}
        report = TrialReport.from_metrics(metrics)
        if report is not None:
            entries.append(TrialEntry(metrics.get("trial_id", ""), dict(r.config or {}), report))
        elif r.error is not None:
            # Seen by this session's callback, or (after a resume) only in Ray's own record.
            same = [k for k, entry in errored.items() if entry.params == dict(r.config or {})]
            if same:
                entries.append(errored.pop(same[0]))
            else:
                tid = Path(r.path).name if getattr(r, "path", None) else ""
                entries.append(TrialEntry(tid, dict(r.config or {}),
                                          errored_report(space, dict(r.config or {}), r.error)))
        else:
            unfinished += 1
    return entries, unfinished
