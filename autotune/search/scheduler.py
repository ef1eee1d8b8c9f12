"""The Ray Tune trial scheduler a space asks for (``search.scheduler``), over the trials' rounds.

A trial measuring in rounds reports each round to Ray Tune
(:func:`autotune.search.trial_report.round_metrics`), so a scheduler can stop it between rounds.
The scheduler reads only the round reports' own metric and clock
(:data:`~autotune.search.trial_report.SCHEDULER_METRIC`, :data:`~autotune.search.trial_report.SCHEDULER_TIME`):
a final report, whose objective may be unknown (None), is never compared. A trial it stops is
recorded ``stopped`` (:func:`autotune.trial.result.stopped_result`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ray.tune.schedulers import AsyncHyperBandScheduler, TrialScheduler

from autotune.search.trial_report import SCHEDULER_METRIC, SCHEDULER_TIME

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

__all__ = ["scheduler_for"]


def scheduler_for(space: SearchSpace) -> TrialScheduler | None:
    """The space's ``search.scheduler`` as a Ray Tune scheduler; None when it names none.

    Raises:
        ValueError: A scheduler without ``measure.sequential`` (the space's load refuses it first).
    """
    settings = space.search.scheduler
    if settings is None:
        return None
    rule = space.measure.sequential
    if rule is None:
        raise ValueError("search.scheduler needs measure.sequential: it acts on the trials' rounds")
    # ASHA's rungs are rounds; at the cap a trial ends by its own rule (stop_last_trials off: a
    # trial's last round must reach its final report).
    return AsyncHyperBandScheduler(
        time_attr=SCHEDULER_TIME, metric=SCHEDULER_METRIC,
        mode="max" if space.objective.direction == "maximize" else "min",
        max_t=rule.max_rounds, grace_period=settings.grace_period or rule.min_rounds,
        reduction_factor=settings.reduction_factor, brackets=1, stop_last_trials=False)
