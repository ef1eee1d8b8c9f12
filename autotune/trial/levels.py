"""Per-concurrency answers: one trial measured at several load levels (``concurrency: [1, 8, 64]``).

A trial whose workload lists concurrency levels measures each of them in turn on the same server
(one start-up). Its :class:`~autotune.trial.result.TrialResult` is the *primary* level's result
(``workload.primary_concurrency``, by default the first level written), so the search's objective,
its constraints and every existing figure read one level exactly as with a single concurrency;
``result.levels`` holds one record per level (:func:`level_record`, ``concurrency`` first), each
judged against the baseline's record of the same level by :func:`autotune.trial.verdict.judge`.
:func:`level_result` turns a level's record back into a ``TrialResult`` for the code that judges,
ranks (the one winner policy, applied per level) and prints results.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult

__all__ = ["LEVEL_FIELDS", "concurrencies", "level_record", "level_result", "metric_suffix",
           "with_levels"]

# What a level's record keeps of its own result: the figures that differ between levels. The
# launch, the log tail, the requests and the telemetry stay on the trial (one server for all).
LEVEL_FIELDS = (
    "status", "reason", "failure", "feasible", "output_tok_s", "output_tok_s_repeats",
    "output_tok_s_spread_pct", "output_tok_s_range_pct", "decode_tok_s_p50", "decode_tok_s_p90",
    "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p90", "itl_ms_p99",
    "e2e_ms_p50", "e2e_ms_p90", "e2e_ms_p99", "completed", "failed_requests", "accept_length",
    "phases", "baseline_tok_s", "baseline_status", "baseline_decode_step_ms", "speedup",
    "break_even_accept_length", "slo_violations", "warmup_tok_s", "warmup_stable",
)


def metric_suffix(concurrency: int) -> str:
    """The suffix of a level's MLflow metrics and CSV columns: ``_c8`` for concurrency 8."""
    return f"_c{concurrency}"


def level_record(concurrency: int, result: TrialResult) -> dict[str, Any]:
    """One level's record: its concurrency and :data:`LEVEL_FIELDS` of the level's result."""
    return {"concurrency": concurrency, **{f: getattr(result, f) for f in LEVEL_FIELDS}}


def with_levels(per_level: Sequence[tuple[int | None, TrialResult]], workload: Any) -> TrialResult:
    """The trial's result from each level's: the primary level's, with every level's record.

    Args:
        per_level: ``(concurrency, result)`` per level, in the order measured.
        workload: The trial's :class:`~autotune.space.workload.Workload`; without
            ``concurrency_levels`` there is one level and its result is returned as it is.
    """
    if not getattr(workload, "concurrency_levels", None):
        return per_level[0][1]
    by_level = dict(per_level)
    primary = replace(by_level[workload.concurrency],
                      levels=[level_record(int(c), r) for c, r in per_level if c is not None])
    # Every level's requests go to requests.jsonl, each marked with the level it was sent at.
    primary.records = [{**rec, "concurrency": c} for c, r in per_level for rec in r.records]
    return primary


def concurrencies(result: TrialResult | None) -> list[int]:
    """The levels a result measured, in order; empty for a single-level result."""
    return [int(lv["concurrency"]) for lv in (getattr(result, "levels", None) or [])]


def level_result(result: TrialResult, concurrency: int) -> TrialResult | None:
    """A level of ``result`` as a result of its own (the trial's launch, the level's figures).

    A result that failed before it measured any level (a crash, a start-up timeout) is returned
    as it is at every level: it failed there too. None when the result measured levels but not
    this one (another workload's result).
    """
    for lv in getattr(result, "levels", None) or []:
        if int(lv["concurrency"]) == concurrency:
            figures = {k: v for k, v in lv.items() if k in LEVEL_FIELDS}
            return replace(result, levels=None, records=[], **figures)
    if result.status == Status.FAILED and not getattr(result, "levels", None):
        return result
    return None
