"""The Ray Tune callback of a search (progress table, MLflow trial runs, tuner overhead) and its registry.

The callback pickles by reference to this module and is looked up again in
:data:`LIVE_CALLBACKS` (the comment there says why). The class and its registry live together in
one importable module so that whatever runs the search, ``python -m autotune.search.run``
included, shares one registry. Also :func:`errored_report`, how a trial that errored inside Ray
is reported, by the callback and by the driver alike.
"""

from __future__ import annotations

import heapq
import time
from typing import Any

from autotune.tracking.interface import SearchTracker


# The live table, tracker and counters of each search running in this process, by experiment
# directory. Ray Tune pickles the run's callbacks into tuner.pkl, and a restored Tuner uses those
# copies; a callback pickles as its key only, so a resumed search reports through this run's
# objects (not stale copies), and any ``out`` stream works (an open file does not pickle).
LIVE_CALLBACKS: dict[str, tuple[Any, Any, dict[str, Any]]] = {}


def _callback_from_key(key: str) -> Any:
    """Unpickle a search callback: the live one of this process, or a no-op if there is none."""
    from ray.tune import Callback

    live = LIVE_CALLBACKS.get(key)
    return Callbacks.make(*live, key=key) if live is not None else Callback()


class Callbacks:
    """Builds the Ray Tune callback that prints progress and tracks trials in MLflow."""

    @staticmethod
    def make(table: Any, tracker: SearchTracker | None, state: dict[str, Any], *, key: str) -> Any:
        from ray.tune import Callback

        from autotune.search.report import TrialReport

        # Tuner overhead of a trial: from the moment its slot was free (the previous trial's
        # bookkeeping done, or the start of the run) to the end of its own bookkeeping, minus what
        # it measured (duration_s of the trial and of a baseline it measured). A clock started
        # at on_trial_start would miss the suggestion and the trial process start-up, and one
        # stopped before the MLflow logging would miss the bookkeeping.
        class SearchCallback(Callback):
            def __reduce__(self):
                return _callback_from_key, (key,)

            def setup(self, **info):
                state["free"] = []
                state["t0"] = time.monotonic()

            def on_trial_start(self, iteration, trials, trial, **info):
                free = state.setdefault("free", [])
                if free:
                    began = heapq.heappop(free)
                elif not state.get("freed"):
                    began = state.get("t0", time.monotonic())  # one of the first slots
                else:
                    # A slot no earlier trial freed (resources allowed one more trial at once):
                    # it was free from now, not from the start of the run.
                    began = time.monotonic()
                state["started"][trial.trial_id] = began

            def on_trial_complete(self, iteration, trials, trial, **info):
                report = TrialReport.from_metrics(trial.last_result)
                started = state["started"].pop(trial.trial_id, None)
                measured = report.measured_s if report is not None and report.result is not None else None
                if report is not None:
                    state["results"].append((trial.trial_id, dict(trial.config), report))
                    # Spooled before the row is printed: a result the table shows is kept, even
                    # if the driver dies while MLflow is written.
                    if tracker is not None:
                        if report.baseline is not None:
                            tracker.log_trial(report.baseline_label,
                                              report.baseline, kind="baseline", drain=False)
                        if report.result is not None:
                            tracker.log_trial(trial.trial_id, report.result, drain=False,
                                              kind="baseline" if report.is_baseline else "trial")
                    table.row(trial=trial.trial_id, params=trial.config, report=report)
                    if tracker is not None:
                        tracker.drain()
                self._free(started, measured)

            def on_trial_error(self, iteration, trials, trial, **info):
                # An error inside Ray (the trial process lost, an exception outside the measured
                # trial) is a failed trial like any other: in the table, MLflow and the counts.
                self._free(state["started"].pop(trial.trial_id, None), None)
                err = trial.get_error() if hasattr(trial, "get_error") else None
                report = errored_report(state.get("space"), dict(trial.config or {}), err)
                where = log_error(key, f"trial {trial.trial_id}: failed inside Ray", err)
                state["errored"][trial.trial_id] = (trial.trial_id, dict(trial.config or {}), report)
                if tracker is not None:
                    tracker.log_trial(trial.trial_id, report.result, drain=False,
                                      kind="baseline" if report.is_baseline else "trial")
                table.row(trial=trial.trial_id, params=trial.config, report=report)
                print(f"                  (traceback: {where})", file=table.out, flush=True)
                if tracker is not None:
                    tracker.drain()

            def on_trial_recover(self, iteration, trials, trial, **info):
                # Ray runs the trial again (its worker or node was lost): one console line, the
                # traceback in a log, the attempt kept as lost in MLflow; the next attempt's
                # result is logged as the following attempt.
                err = trial.get_error() if hasattr(trial, "get_error") else None
                report = errored_report(state.get("space"), dict(trial.config or {}), err)
                where = log_error(key, f"trial {trial.trial_id}: attempt lost, Ray runs it again", err)
                print(f"  trial {trial.trial_id}: an attempt ended without a result ({_brief(err)}); "
                      f"Ray runs it again (details: {where})", file=table.out, flush=True)
                if tracker is not None:
                    tracker.log_lost_attempt(trial.trial_id, (report.result.reason or "") + "; Ray runs it again",
                                             params=dict(trial.config or {}),
                                             kind="baseline" if report.is_baseline else "trial")

            def _free(self, started: float | None, measured: float | None) -> None:
                if started is None:
                    return
                now = time.monotonic()
                state["freed"] = True
                heapq.heappush(state.setdefault("free", []), now)
                if measured is not None:
                    state["overheads"].append(max(now - started - measured, 0.0))

        return SearchCallback()


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


def errored_report(space: Any, config: dict[str, Any], error: BaseException | None) -> Any:
    """A trial that errored inside Ray, as the report it stands in for: a failed result with the
    error as its reason (a :class:`~autotune.search.report.TrialReport`)."""
    from autotune.search.report import TrialReport
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
