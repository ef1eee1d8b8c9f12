"""The one winner policy, and the objective it ranks by.

The search's summary (:mod:`autotune.search.conclude`), MLflow's winner tags (:meth:`autotune.tracking.tracker.Tracker.
finish_search`) and the export (:mod:`autotune.export.launch_command`) all pick the winner here, each from its
own records wrapped as :class:`Contender`, so the printed winner, ``autotune.winner_run_id`` and the
exported command name the same config.

The rules, in order:

1. Speculative candidates are feasible configs with a known objective value. If finalists were
   re-measured, only the finalists that held up (feasible again) compete: a config whose gain
   did not survive its confirmation is not recommended, and neither is one that was never
   confirmed when others were. Otherwise every feasible trial competes. The best by the
   objective wins.
2. A feasible baseline that is better still wins instead: feasibility only says a config beats
   the baseline of *its own* non-speculative settings, and another group's baseline can be better
   overall. A baseline that broke an SLO is not feasible and never wins.
3. With no speculative candidate, the best feasible baseline wins.
4. Otherwise nothing wins (None). An unknown value never competes, so an unmeasured trial can
   never be the best, in either direction.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, TypeVar

from autotune.figures import finite

TRIAL, FINALIST = "trial", "finalist"

#: Why a baseline is the winner (:attr:`Pick.note`), one constant each so readers can tell them apart.
BASELINE_BETTER = "a no-speculation baseline is better than every feasible speculative config"
NO_FINALIST_HELD = "no finalist held up when re-measured"
NONE_BEAT = "no speculative config beat its baseline"

#: A load level as the caller names it (a ``LoadLevel``, or a bare concurrency).
L = TypeVar("L", bound=Hashable)


def metric_field(name: str) -> str:
    """The record field of an objective or SLO metric: ``p99_ttft_ms`` is ``ttft_ms_p99``.

    Objectives and SLOs name latencies percentile first (the schema's names); trial records,
    their JSON and MLflow metrics keep the field names. Other names are fields already.
    """
    if name.startswith("p") and "_" in name and name[1:].split("_", 1)[0].isdigit():
        q, rest = name[1:].split("_", 1)
        return f"{rest}_p{q}"
    return name


def unmeasured_value(*, maximize: bool) -> float:
    """What Optuna is told for a trial that measured nothing: worse than any measured value.

    It always comes with a violated ``failed`` constraint and the ``objective_unmeasured`` user
    attr, and it never leaves Optuna (Ray's result, MLflow and the export keep None).
    """
    return -math.inf if maximize else math.inf


@dataclass(frozen=True)
class Contender:
    """One record as the winner policy sees it.

    Attributes:
        ref: The caller's own record (a ``TrialResult``, an MLflow run, ...), handed back.
        value: The objective's value, None when unknown.
        is_baseline: The config runs without speculation.
        feasible: The record's verdict is feasible (constraints and SLOs hold).
        stage: ``"trial"`` (measured by the search) or ``"finalist"`` (re-measured to confirm).
    """

    ref: Any
    value: float | None
    is_baseline: bool
    feasible: bool
    stage: str = TRIAL

    def __post_init__(self) -> None:
        if self.stage not in (TRIAL, FINALIST):
            raise ValueError(f"stage must be {TRIAL!r} or {FINALIST!r}, not {self.stage!r}")


@dataclass(frozen=True)
class Pick:
    """The winner: the caller's record, whether it is a baseline, and one line on why."""

    ref: Any
    is_baseline: bool
    note: str


def _score(c: Contender) -> float:
    """The value of a candidate :func:`_best` kept (one whose value is known)."""
    value = finite(c.value)
    if value is None:
        raise ValueError(f"candidate {c.ref!r} has no known value")
    return value


def _best(pool: Sequence[Contender], maximize: bool) -> Contender | None:
    scored = [c for c in pool if finite(c.value) is not None]
    if not scored:
        return None
    return (max if maximize else min)(scored, key=_score)


def pick_winner(candidates: Iterable[Contender], *, maximize: bool) -> Pick | None:
    """The winner by the rules of the module doc, or None when nothing feasible was measured.

    Args:
        candidates: Every measured record: trials, finalists and baselines.
        maximize: The objective's direction.
    """
    cands = list(candidates)
    finalists = [c for c in cands if c.stage == FINALIST and not c.is_baseline]
    if finalists:
        pool = [c for c in finalists if c.feasible]
        which = "confirmed "
    else:
        pool = [c for c in cands if c.stage == TRIAL and not c.is_baseline and c.feasible]
        which = ""
    best = _best(pool, maximize)
    best_base = _best([c for c in cands if c.is_baseline and c.feasible], maximize)
    if best is not None and (best_base is None or (_score(best) > _score(best_base) if maximize
                                                   else _score(best) < _score(best_base))):
        return Pick(best.ref, False, f"best {which}feasible speculative config")
    if best_base is not None:
        if best is not None:
            why = BASELINE_BETTER
        elif finalists:
            why = NO_FINALIST_HELD
        else:
            why = NONE_BEAT
        return Pick(best_base.ref, True, why)
    return None


def pick_per_level(levels: Iterable[L], candidates_at: Callable[[L], Iterable[Contender]], *,
                   maximize: bool) -> dict[L, Pick | None]:
    """The winner at each concurrency level: :func:`pick_winner`, the same rules, applied to the
    candidates as measured and judged at that level (``candidates_at(level)``).

    A baseline can win one level and a speculative config another: each level's feasibility is
    its own config against the baseline's measurement at the same level.
    """
    return {level: pick_winner(candidates_at(level), maximize=maximize) for level in levels}


__all__ = ["FINALIST", "TRIAL", "Contender", "Pick", "metric_field", "pick_per_level",
           "pick_winner", "unmeasured_value"]
