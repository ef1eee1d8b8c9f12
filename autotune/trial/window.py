"""Which window's tok/s is a trial's objective: the one place that decides it.

Every repeat has two output tok/s figures: over its whole window (first send to last end,
:attr:`autotune.bench.records.BenchResult.output_tok_s`) and over its steady interval, the window
without its ramp-up and tail (:func:`autotune.bench.steady.steady_window`). :func:`objective_rates`
picks, for a trial's repeats together, the figures that speak for them: the steady ones where the
space asks for them (``measure.window: steady``, the default), the load is a closed loop above
concurrency 1, and every repeat's steady interval is usable; else the whole windows, with the reason.
One rule for all repeats, so a median never mixes the two. The result (``output_tok_s``), the
rounds of sequential measurement, the verdict, Optuna and the winner all read the figure this gives.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.bench.records import BenchResult
from autotune.bench.steady import SteadyWindow, steady_window
from autotune.profile.load import LoadWindow

#: ``measure.window``: ``steady`` (the steady interval where usable, else the whole window) or
#: ``whole`` (always the whole window, the figure before issue 34).
STEADY, WHOLE = "steady", "whole"
WINDOWS = (STEADY, WHOLE)


@dataclass(frozen=True)
class RepeatRates:
    """A trial's per-repeat tok/s and which window they come from.

    Attributes:
        rates: The objective's figure of each repeat (completed repeats only, in order).
        window: ``steady`` or ``whole``: the window ``rates`` are over.
        reason: Why the whole window speaks where the steady one was asked; None otherwise.
        whole: Each repeat's whole-window tok/s.
        steady: Each repeat's steady interval (one per repeat with a full load to hold; empty
            at concurrency 1, in an open loop, or with ``window: whole``).
    """

    rates: list[float]
    window: str
    reason: str | None
    whole: list[float]
    steady: list[SteadyWindow] = field(default_factory=list)

    def steady_median(self, attribute: str) -> float | None:
        """The median of a :class:`SteadyWindow` figure over the repeats; None unless every
        repeat has it."""
        values = [getattr(s, attribute) for s in self.steady]
        if not values or any(v is None for v in values):
            return None
        return float(statistics.median(values))


def full_load(bench: BenchResult, load: LoadWindow | None) -> int | None:
    """The in-flight count that is a full load for ``bench``: the concurrency asked, or the server's
    cap when lower (:attr:`LoadWindow.sustainable`); None for an open loop without a cap."""
    if load is not None and load.sustainable is not None:
        return load.sustainable
    return bench.concurrency


def objective_rates(benches: Sequence[BenchResult], loads: Sequence[LoadWindow], *,
                    window: str) -> RepeatRates:
    """The per-repeat figures that speak for a trial (module docstring).

    Args:
        benches: The repeats measured so far (failed ones are left out of every list).
        loads: Their server loads, one a repeat (fewer: the concurrency asked is the full load).
        window: ``steady`` or ``whole`` (``measure.window``).

    Raises:
        ValueError: An unknown ``window``.
    """
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    paired = [(b, loads[i] if len(loads) == len(benches) else None) for i, b in enumerate(benches)
              if b.output_tok_s is not None and not b.failed]
    whole = [b.output_tok_s for b, _ in paired if b.output_tok_s is not None]
    if window == WHOLE:
        return RepeatRates(whole, WHOLE, None, whole)
    levels = [full_load(b, load) for b, load in paired]
    if not paired:
        return RepeatRates(whole, WHOLE, "no repeat completed", whole)
    if any(b.request_rate is not None or level is None for (b, _), level in zip(paired, levels, strict=True)):
        return RepeatRates(whole, WHOLE, "an open loop (request_rate): its load is the arrivals'", whole)
    if max(level for level in levels if level is not None) <= 1:
        return RepeatRates(whole, WHOLE, "concurrency 1: no ramp or tail to leave out", whole)
    steady = [steady_window(b.records, level=level)
              for (b, _), level in zip(paired, levels, strict=True) if level is not None]
    unusable = [(i, s) for i, s in enumerate(steady) if not s.usable]
    if unusable:
        i, s = unusable[0]
        return RepeatRates(whole, WHOLE, f"repeat {i + 1}: {s.reason}", whole, steady)
    return RepeatRates([s.tok_s for s in steady if s.tok_s is not None], STEADY, None, whole, steady)
