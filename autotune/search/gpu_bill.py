"""A search's GPU bill: its servers' records and the tuner's overhead as events, counted once.

:func:`search_events` turns what a search ran (each trial, the group baselines the trials
measured, each finalist and its fresh baseline, the tuner's overhead between trials) into
:class:`~autotune.trial.gpu_time.Spent` events; :func:`autotune.trial.gpu_time.count` adds them up.
:func:`bill_lines` and :func:`bill_table` say the totals on the console and in ``summary.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from autotune.search.trial_report import TrialEntry
from autotune.trial.gpu_time import (
    BASELINES,
    FINALISTS,
    OVERHEAD,
    PARTS,
    STAGES,
    TRIALS,
    GpuTotals,
    Spent,
    count,
    events_of,
)
from autotune.trial.result import TrialResult

__all__ = ["PART_LABELS", "bill_lines", "bill_table", "search_events", "search_totals", "unrecorded"]

PART_LABELS = {"startup": "start-up", "warmup": "warm-up", "measure": "measurement",
               "teardown": "teardown", OVERHEAD: "tuner overhead"}


def search_events(entries: Sequence[TrialEntry],
                  finalists: Iterable[tuple[TrialResult, TrialResult | None]] = (),
                  overheads: Sequence[float] = (), overhead_gpus: Sequence[int] = ()) -> list[Spent]:
    """The events of a search.

    Args:
        entries: Every trial that ended; a trial's own server is a ``trials`` event, the group
            baseline it measured a ``baselines`` one.
        finalists: ``(re-measurement, fresh baseline or None)`` per finalist, both ``finalists``.
        overheads: The tuner's overhead of each trial, in seconds.
        overhead_gpus: The GPUs each of those trials held (same order); 1 where not given.

    Raises:
        ValueError: More ``overhead_gpus`` than ``overheads``.
    """
    if len(overhead_gpus) > len(overheads):
        raise ValueError(f"{len(overhead_gpus)} overhead GPU counts for {len(overheads)} overheads")
    events: list[Spent] = []
    for entry in entries:
        events += events_of(entry.report.result.gpu_time if entry.report.result else None, TRIALS)
        events += events_of(entry.report.baseline.gpu_time if entry.report.baseline else None, BASELINES)
    for result, base in finalists:
        events += events_of(result.gpu_time, FINALISTS)
        events += events_of(base.gpu_time if base is not None else None, FINALISTS)
    gpus = list(overhead_gpus) + [1] * (len(overheads) - len(overhead_gpus))
    events += [Spent(TRIALS, OVERHEAD, s, g) for s, g in zip(overheads, gpus, strict=True)]
    return events


def search_totals(entries: Sequence[TrialEntry],
                  finalists: Iterable[tuple[TrialResult, TrialResult | None]] = (),
                  overheads: Sequence[float] = (), overhead_gpus: Sequence[int] = ()) -> GpuTotals:
    """:func:`~autotune.trial.gpu_time.count` of :func:`search_events`."""
    return count(search_events(entries, finalists, overheads, overhead_gpus))


def unrecorded(entries: Sequence[TrialEntry]) -> int:
    """Trials with no GPU record: no server started (a refused launch, an invalid config) or the
    trial errored inside Ray, so their time is not in the totals."""
    return sum(1 for e in entries if e.report.result is None or e.report.result.gpu_time is None)


def _fmt(gpu_s: float) -> str:
    return f"{gpu_s:,.1f} GPU-s" if gpu_s < 3600 else f"{gpu_s:,.0f} GPU-s ({gpu_s / 3600:.2f} GPU-h)"


def bill_lines(totals: GpuTotals, *, unrecorded_trials: int = 0) -> list[str]:
    """The console's lines: the total, the split by part, the split by stage."""
    parts = ", ".join(f"{PART_LABELS[p]} {totals.by_part.get(p, 0.0):.1f}" for p in PARTS)
    stages = ", ".join(f"{s} {totals.by_stage.get(s, 0.0):.1f} ({totals.servers.get(s, 0)} servers)"
                       for s in STAGES)
    lines = [f"GPU time: {_fmt(totals.gpu_s)}", f"  by part (GPU-s): {parts}",
             f"  by stage (GPU-s): {stages}"]
    if unrecorded_trials:
        lines.append(f"  ({unrecorded_trials} trial(s) started no server or errored inside Ray: "
                     "not counted)")
    return lines


def bill_table(totals: GpuTotals) -> list[str]:
    """``summary.md``'s table: GPU-seconds per part (rows) and stage (columns), with totals."""
    head = "| part | " + " | ".join(STAGES) + " | total |"
    rows = [head, "|---|" + "---|" * (len(STAGES) + 1)]
    rows += [f"| {PART_LABELS[p]} | " + " | ".join(f"{totals.split[s][p]:.1f}" for s in STAGES)
             + f" | {totals.by_part[p]:.1f} |" for p in PARTS]
    rows.append("| **total** | " + " | ".join(f"{totals.by_stage[s]:.1f}" for s in STAGES)
                + f" | **{totals.gpu_s:.1f}** |")
    rows.append("| servers started | " + " | ".join(str(totals.servers[s]) for s in STAGES)
                + f" | {sum(totals.servers.values())} |")
    return rows
