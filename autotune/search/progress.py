"""The live table a search prints: one row per finished trial, with the best so far, its time
and (from the second trial on) "k of N" with an ETA; and :class:`Heartbeat`, the line a long
silent stretch (Ray's start, the first trial, the finalists) prints now and then."""

from __future__ import annotations

import statistics
import sys
import threading
import time
from types import TracebackType
from typing import Any, Callable, Mapping, Sequence, TextIO

from autotune.search.trial_report import TrialReport
from autotune.space import synthetic
from autotune.trial.outcome import Status

# Parameters worth a column, in this order, when the space searches them.
_KEY_PARAMS = (("speculative_num_steps", "steps"), ("speculative_eagle_topk", "topk"),
               ("speculative_num_draft_tokens", "draft"), ("tp_size", "tp"))


def _fmt(v: Any, spec: str) -> str:
    """``v`` by ``spec``; unknown is "-", right-aligned to the spec's width so the columns hold."""
    if v is None:
        width = spec.split(".")[0]
        return format("-", f">{width}") if width.isdigit() else "-"
    return format(v, spec)


def describe_params(params: Mapping[str, Any]) -> str:
    """Compact text of the parameters, key ones first with short names."""
    parts = []
    for name, short in _KEY_PARAMS:
        if name in params:
            parts.append(f"{short}={params[name]}")
    for name, value in params.items():
        if name not in dict(_KEY_PARAMS) and value is not None:
            short = name.replace("speculative_", "spec_")
            parts.append(f"{short}={value}")
    return " ".join(parts) or "baseline"


def clock(seconds: float | None) -> str:
    """A duration as people read it: ``42s``, ``3m05s``, ``1h02m``; ``-`` when unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def eta_line(*, done: int, total: int, since_start_s: float, trial_times: Sequence[float],
             done_here: int | None = None) -> str | None:
    """``trial k of N done ...; ETA ...`` from the trials measured so far, or None before this
    session's second trial (one trial's time is no pace) and after the last.

    The pace is the wall time since this session's trials began over the trials it finished
    (``done_here``, default ``done``; a resumed search's earlier trials count in ``done`` only),
    concurrent trials included; the median trial time is shown beside it. The stop rule may end the search sooner,
    and the finalists come after: the ETA says so rather than promising an end.
    """
    here = done if done_here is None else done_here
    if here < 2 or done >= total or since_start_s <= 0:
        return None
    left = total - done
    pace = since_start_s / here
    each = f", {clock(statistics.median(trial_times))} a trial (median)" if trial_times else ""
    return (f"    trial {done} of {total} done in {clock(since_start_s)}{each}; "
            f"ETA {clock(pace * left)} for the other {left} at this pace (at most: the stop rule "
            "may end sooner; finalists after)")


class ProgressTable:
    """Prints rows as trials finish. Printing lives here, not in the measuring code.

    Args:
        out: Where rows go.
        maximize: Objective direction, for "best so far".
        objective: The objective's metric, named in the "best so far" column's header (its
            values are the objective's, a latency for a minimised latency objective).
        total: The trials planned (``budget.trials``), for "trial k of N" and the ETA; None
            when unknown (no ETA).
    """

    def __init__(self, out: TextIO | None = None, *, maximize: bool = True,
                 objective: str = "output_tok_s", total: int | None = None) -> None:
        self.out = sys.stdout if out is None else out
        self.maximize = maximize
        best = "best tok/s" if objective == "output_tok_s" else f"best {objective}"
        self.header_line = (f"{'#':>3} {'trial':<14} {'params':<52} {'tok/s':>8} {'accept':>6} "
                            f"{'speedup':>7} {'status':<10} {best:>10} {'time':>7}")
        self.total = total
        self.started: float | None = None  # when this session's trials began (monotonic)
        self.trial_times: list[float] = []  # this session's trials' wall times, seconds
        self.last_line = time.monotonic()  # when the table last printed (the heartbeat reads it)
        self.rows = 0
        self.resumed = 0  # rows finished before a resume (no pace of this session's)
        self._headed = False
        self.best: float | None = None
        self.best_params: str | None = None

    def carry_on(self, finished: Sequence[tuple[Mapping[str, Any], TrialReport]]) -> None:
        """Continue after a resume: the rows number on from the trials finished earlier, and the
        best-so-far column starts at their best (else a resumed search's first row would read as
        its best)."""
        for params, report in finished:
            self.rows += 1
            self.resumed += 1
            self._consider(params, report)
        if finished:
            best = "none feasible" if self.best is None else f"{self.best:.1f} ({self.best_params})"
            print(f"{len(finished)} trial(s) finished before the resume; best so far: {best}",
                  file=self.out, flush=True)

    def _consider(self, params: Mapping[str, Any], report: TrialReport) -> None:
        value = report.objective
        if report.feasible and value is not None:
            if self.best is None or (value > self.best if self.maximize else value < self.best):
                self.best = value
                self.best_params = describe_params(params)

    def header(self) -> None:
        print(self.header_line, file=self.out, flush=True)
        print("-" * len(self.header_line), file=self.out, flush=True)

    def say(self, line: str) -> None:
        """One line of the search's progress, outside the rows (the heartbeat's clock restarts)."""
        print(line, file=self.out, flush=True)
        self.last_line = time.monotonic()

    def begin(self) -> None:
        """The trials begin now: the ETA's clock starts (the first call counts)."""
        if self.started is None:
            self.started = time.monotonic()

    def row(self, *, trial: str, params: Mapping[str, Any], report: TrialReport,
            label: str | None = None, elapsed_s: float | None = None) -> None:
        """One finished trial's row; ``elapsed_s`` is its wall time (None: unknown, shown ``-``)."""
        if not self._headed:
            self.header()
            self._headed = True
        self.rows += 1
        self._consider(params, report)
        status = report.status or "?"
        text = describe_params(params) if label is None else label
        # A forced accept length is marked "s": it is the synthetic model's, not a draft's.
        forced = report.acceptance == synthetic.SYNTHETIC and report.accept_length is not None
        accept = _fmt(report.accept_length, "5.2f") + "s" if forced else _fmt(report.accept_length, "6.2f")
        print(f"{self.rows:>3} {trial[:14]:<14} {text[:52]:<52} "
              f"{_fmt(report.output_tok_s, '8.1f')} {accept:>6} "
              f"{_fmt(report.speedup, '7.3f')} {status:<10} {_fmt(self.best, '10.1f')} "
              f"{clock(elapsed_s):>7}",
              file=self.out, flush=True)
        self.last_line = time.monotonic()
        reason = report.reason
        if reason and status != Status.FEASIBLE:
            print(f"{'':>18}-> {reason[:110]}", file=self.out, flush=True)
        result = report.result
        if result is not None and result.load_capped:
            # The figure above was not taken at the asked concurrency: say what the server ran.
            print(f"{'':>18}-> capped load: {result.load_note}", file=self.out, flush=True)
        if elapsed_s is not None:
            self.trial_times.append(elapsed_s)
        if self.total is not None and self.started is not None:
            line = eta_line(done=self.rows, total=self.total, since_start_s=time.monotonic() - self.started,
                            trial_times=self.trial_times, done_here=self.rows - self.resumed)
            if line is not None:
                print(line, file=self.out, flush=True)


class Heartbeat:
    """A line every ``every_s`` seconds while a long step runs and nothing else has printed.

    Used as a context manager around a silent stretch (Ray starting, the trials, the finalists).
    A daemon thread waits on an event, so leaving the block (or Ctrl-C in the main thread) stops it
    at once. ``quiet_since`` says when the console last printed (a table's ``last_line``); the
    heartbeat speaks only after ``every_s`` of silence, so it never interleaves with busy rows.

    Args:
        out: Where the line goes.
        what: The step, as in "still {what}".
        every_s: Seconds of silence before a line.
        quiet_since: When the console last printed (``time.monotonic``); None: the heartbeat's own.
    """

    def __init__(self, out: TextIO, what: str, *, every_s: float = 30.0,
                 quiet_since: Callable[[], float] | None = None) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")
        self.out, self.what, self.every_s = out, what, every_s
        self._quiet_since = quiet_since
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self._last = self._t0
        self.beats = 0

    def _since(self) -> float:
        return max(self._last, self._quiet_since()) if self._quiet_since is not None else self._last

    def _run(self) -> None:
        while True:
            wait = self._since() + self.every_s - time.monotonic()
            if self._stop.wait(max(wait, 0.05)):
                return
            if time.monotonic() - self._since() >= self.every_s:
                self.beats += 1
                self._last = time.monotonic()
                print(f"  ... still {self.what} ({clock(self._last - self._t0)} so far)",
                      file=self.out, flush=True)

    def __enter__(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._run, name="autotune-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
