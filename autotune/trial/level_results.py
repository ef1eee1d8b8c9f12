"""Per-level answers: one trial measured at several load levels.

A level is a closed-loop concurrency (``concurrency: [1, 8, 64]``) or an open-loop request rate
(``request_rate: [2, 8]``); :class:`~autotune.space.load_levels.LoadLevel` is the one definition
of what a level is, its label (``c8``, ``r2.5``) and how it is named in metrics, ``trials.csv``, the
summary and the exports (re-exported here for the code that judges and reports levels).

A trial whose workload lists levels measures each of them in turn on the same server
(one start-up). Its :class:`~autotune.trial.result.TrialResult` is the *primary* level's result
(``workload.primary_concurrency`` or ``primary_request_rate``, by default the first level written),
so the search's objective, its constraints and every existing figure read one level exactly as with
a single load; ``result.levels`` holds one record per level (:func:`level_record`, the level's
``concurrency`` or ``request_rate`` first), each judged against the baseline's record of the same
level by :func:`autotune.trial.verdict.judge`. :func:`level_result` turns a level's record back
into a ``TrialResult`` for the code that judges, ranks (the one winner policy, applied per level)
and prints results.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from autotune.space.load_levels import AXES, CONCURRENCY, REQUEST_RATE, LoadLevel, as_level
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult

if TYPE_CHECKING:
    from autotune.space.workload import Workload

__all__ = ["AXES", "CONCURRENCY", "LEVEL_FIELDS", "REQUEST_RATE", "LoadLevel", "as_level", "concurrencies",
           "level_record", "level_result", "levels_measured", "metric_suffix", "with_levels"]

# What a level's record keeps of its own result: the figures that differ between levels. The
# launch, the log tail, the requests and the telemetry stay on the trial (one server for all).
LEVEL_FIELDS = (
    "status", "reason", "failure", "feasible", "output_tok_s", "output_tok_s_repeats",
    "output_tok_s_spread_pct", "output_tok_s_range_pct", "decode_tok_s_p50", "decode_tok_s_p90",
    "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p90", "itl_ms_p99",
    "e2e_ms_p50", "e2e_ms_p90", "e2e_ms_p99", "completed", "failed_requests", "accept_length",
    "phases", "baseline_tok_s", "baseline_status", "baseline_decode_step_ms", "speedup",
    "break_even_accept_length", "slo_violations", "warmup_tok_s", "warmup_stable",
    "load_asked", "load_cap", "load_ran", "load_queued", "load_tail_pct", "load_client_tail_pct",
    "load_capped", "load_capped_windows", "load_note", "load_comparison", "sequential",
    "window", "window_reason", "output_tok_s_whole", "output_tok_s_steady", "output_tok_s_whole_spread_pct",
    "output_tok_s_whole_range_pct", "output_tok_s_steady_spread_pct", "output_tok_s_steady_range_pct",
    "steady_share_pct", "steady_waves",
)


def metric_suffix(level: LoadLevel | int) -> str:
    """The suffix of a level's MLflow metrics and CSV columns: ``_c8``, ``_r2.5``."""
    return "_" + as_level(level).label


def level_record(level: LoadLevel | int, result: TrialResult) -> dict[str, Any]:
    """One level's record: its ``concurrency`` or ``request_rate``, and :data:`LEVEL_FIELDS`."""
    return {**as_level(level).field(), **{f: getattr(result, f) for f in LEVEL_FIELDS}}


def with_levels(per_level: Sequence[tuple[LoadLevel | int | None, TrialResult]],
                workload: Workload) -> TrialResult:
    """The trial's result from each level's: the primary level's, with every level's record.

    Args:
        per_level: ``(level, result)`` per level, in the order measured.
        workload: The trial's :class:`~autotune.space.workload.Workload`; without levels
            (:meth:`~autotune.space.workload.Workload.load_levels`) there is one level and its
            result is returned as it is.
    """
    primary_level = workload.primary_level() if hasattr(workload, "primary_level") else None
    if primary_level is None:
        return per_level[0][1]
    measured = [(as_level(lv), r) for lv, r in per_level if lv is not None]
    primary = replace(dict(measured)[primary_level],
                      levels=[level_record(lv, r) for lv, r in measured])
    # Every level's requests go to requests.jsonl, each marked with the level it was sent at.
    primary.records = [{**rec, **lv.field()} for lv, r in measured for rec in r.records]
    return primary


def levels_measured(result: TrialResult | None) -> list[LoadLevel]:
    """The levels a result measured, in order; empty for a single-level result."""
    return [LoadLevel.of_record(lv) for lv in (getattr(result, "levels", None) or [])]


def concurrencies(result: TrialResult | None) -> list[int]:
    """The concurrency levels a result measured, in order (for callers that know the axis)."""
    return [int(lv.value) for lv in levels_measured(result) if lv.axis == CONCURRENCY]


def level_result(result: TrialResult, level: LoadLevel | int) -> TrialResult | None:
    """A level of ``result`` as a result of its own (the trial's launch, the level's figures).

    A result that failed before it measured any level (a crash, a start-up timeout) is returned
    as it is at every level: it failed there too. None when the result measured levels but not
    this one (another workload's result).
    """
    level = as_level(level)
    for lv in getattr(result, "levels", None) or []:
        if LoadLevel.of_record(lv) == level:
            figures = {k: v for k, v in lv.items() if k in LEVEL_FIELDS}
            return replace(result, levels=None, records=[], **figures)
    if result.status == Status.FAILED and not getattr(result, "levels", None):
        return result
    return None
