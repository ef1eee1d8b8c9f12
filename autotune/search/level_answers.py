"""The search's per-level answers: finalists for every level, and the best config per level.

With ``workload.concurrency: [1, 8, 64]`` (or ``request_rate: [2, 8]``) every trial is measured and judged at each level
(:mod:`autotune.trial.level_results`), and Optuna optimises the primary level. At the end
:func:`level_finalists` adds, for each other level, the best config at that level to the finalists
(so each level's answer is a confirmed config, as the single winner is), and :func:`level_answers`
applies the one winner policy (:func:`autotune.trial.winner.pick_per_level`) to every measurement
as judged at each level. The rows it returns are what the summary JSON, ``summary.md``, the console
and the export's per-level table show.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.figures import finite
from autotune.trial.level_results import LoadLevel, as_level, level_result, levels_measured
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.winner import FINALIST, Contender, pick_per_level

__all__ = ["Measured", "LEVEL_FIGURES", "level_answers", "level_finalists", "levels_of"]

# What a level's answer reports of the winning measurement at that level.
LEVEL_FIGURES = ("output_tok_s", "baseline_tok_s", "speedup", "accept_length",
                 "break_even_accept_length", "ttft_ms_p99", "itl_ms_p99")


@dataclass(frozen=True)
class Measured:
    """One measurement of the search as the per-level answers see it.

    Attributes:
        label: Its row's trial id (``3``, ``finalist-3``, ``3-baseline``).
        result: Its :class:`~autotune.trial.result.TrialResult` (with ``levels``).
        stage: ``trial`` or ``finalist`` (:mod:`autotune.trial.winner`).
    """

    label: str
    result: TrialResult
    stage: str


def levels_of(results: Iterable[TrialResult | None]) -> list[LoadLevel]:
    """The levels the search measured (the first result with levels), else []."""
    for result in results:
        found = levels_measured(result)
        if found:
            return found
    return []


def level_finalists(measured: Sequence[tuple[Any, Any]], levels: Sequence[LoadLevel | int],
                    primary: LoadLevel | int,
                    *, metric: str, maximize: bool, chosen: Sequence[Any]) -> list[Any]:
    """Items to confirm besides ``chosen``: the best feasible speculative config of each other level.

    Args:
        measured: ``(item, result)`` per trial; items are what the caller confirms.
        levels: The search's levels.
        primary: The level Optuna optimised (its finalists are ``chosen`` already).
        metric: The objective (a schema name).
        maximize: Its direction.
        chosen: The primary level's finalists.
    """
    extra: list[Any] = []
    primary = as_level(primary)
    for level in map(as_level, levels):
        if level == primary:
            continue
        best, best_value = None, None
        for item, result in measured:
            one = level_result(result, level) if result is not None else None
            if one is None or one.is_baseline or one.status != Status.FEASIBLE:
                continue
            value = finite(one.metric(metric))
            if value is None:
                continue
            if best_value is None or (value > best_value if maximize else value < best_value):
                best, best_value = item, value
        if best is not None and best not in chosen and best not in extra:
            extra.append(best)
    return extra


def level_answers(measured: Sequence[Measured], levels: Sequence[LoadLevel | int], *, metric: str,
                  maximize: bool) -> list[dict[str, Any]]:
    """The best config at each level, by the one winner policy applied to that level.

    Returns:
        One row per level, in the order written: the level's ``concurrency`` or
        ``request_rate``, its ``level`` label (``c8``, ``r2.5``), ``winner`` (its row label,
        None when nothing at that level is feasible), ``is_baseline``, ``params``, ``note``,
        ``status``, ``objective`` (the metric's value there) and :data:`LEVEL_FIGURES`; unknown
        figures are None.
    """
    def candidates_at(level: LoadLevel) -> list[Contender]:
        out = []
        for m in measured:
            one = level_result(m.result, level)
            if one is None:
                continue
            out.append(Contender(ref=(m, one), value=finite(one.metric(metric)),
                                 is_baseline=bool(one.is_baseline),
                                 feasible=one.status == Status.FEASIBLE, stage=m.stage))
        return out

    rows = []
    wanted = [as_level(level) for level in levels]  # a bare int is a concurrency
    for level, pick in pick_per_level(wanted, candidates_at, maximize=maximize).items():
        row: dict[str, Any] = {**level.field(), "level": level.label, "winner": None, "is_baseline": None,
                               "params": None, "note": "nothing feasible at this level",
                               "status": None, "objective": None, "confirmed": None,
                               **dict.fromkeys(LEVEL_FIGURES)}
        if pick is not None:
            m, one = pick.ref
            row.update(winner=m.label, is_baseline=pick.is_baseline, params=dict(one.params),
                       note=pick.note, status=one.status, objective=finite(one.metric(metric)),
                       confirmed=m.stage == FINALIST,
                       **{f: getattr(one, f) for f in LEVEL_FIGURES})
            if pick.is_baseline:
                row["accept_length"] = row["break_even_accept_length"] = None
        rows.append(row)
    return rows
