"""``search.scheduler``: what a space may ask for (refused at load with its file, line and field), and
the Ray Tune scheduler it becomes (``search.scheduler.scheduler_for``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray.tune.schedulers import AsyncHyperBandScheduler, TrialScheduler

from autotune.errors import ConfigError
from autotune.search.scheduler import scheduler_for
from autotune.search.trial_report import round_metrics
from tests.conftest import SMALL_SPACE


def _data(scheduler: Any, *, measure: dict[str, Any] | None = None, objective: str = "output_tok_s") -> dict:
    data = copy.deepcopy(SMALL_SPACE)
    data["measure"] = measure if measure is not None else {
        "startup_timeout_s": 60, "sequential": {"min_rounds": 2, "max_rounds": 6}}
    data["objective"] = {"metric": objective}
    data["search"] = {"scheduler": scheduler}
    return data


def test_no_scheduler_unless_asked(space_factory: Any) -> None:
    assert scheduler_for(space_factory(_data(None))) is None


class _Trial:
    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id


def _round(number: int, tok_s: list[float], decision: str = "continue") -> dict[str, Any]:
    return round_metrics(number=number, readings=tok_s, decision=decision)


def test_asha_compares_the_rounds_and_never_a_final_report(space_factory: Any) -> None:
    # The rounds give only objectives to maximise (output_tok_s, speedup): the load refuses others.
    scheduler = scheduler_for(space_factory(_data({"kind": "asha", "reduction_factor": 2})))
    assert isinstance(scheduler, AsyncHyperBandScheduler)
    good, bad = _Trial("good"), _Trial("bad")
    for t in (good, bad):
        scheduler.on_trial_add(None, t)
    high, low = [100.0, 101.0], [50.0, 51.0]
    # grace_period left out is min_rounds (2): round 1 is never compared.
    assert scheduler.on_trial_result(None, bad, _round(1, low[:1])) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, good, _round(2, high)) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, bad, _round(2, low)) == TrialScheduler.STOP
    # A trial's last round (its own rule ended it) and its final report (objective maybe None) are
    # never the scheduler's: a complete trial always reaches its result.
    late = _Trial("late")
    scheduler.on_trial_add(None, late)
    assert scheduler.on_trial_result(None, late, _round(2, low, decision="stop-worse")) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, late, {"objective": None, "final": True}) == TrialScheduler.CONTINUE
    # At the cap (max_rounds 6) a trial is not stopped for being last (stop_last_trials off).
    assert scheduler.on_trial_result(None, good, _round(6, high * 3)) == TrialScheduler.CONTINUE


@pytest.mark.parametrize(("scheduler", "extra", "field", "says"), [
    ({"kind": "hyperband"}, {}, "search.scheduler.kind", "asha"),
    ({"kind": "asha", "reduction_factor": 1}, {}, "search.scheduler.reduction_factor", ">= 2"),
    ({"kind": "asha", "grace_period": 0}, {}, "search.scheduler.grace_period", ">= 1"),
    ({"kind": "asha", "grace_period": 7}, {}, "search.scheduler.grace_period", "at most max_rounds"),
    ({"kind": "asha", "budget": 3}, {}, "search.scheduler.budget", "grace_period"),
    ({"kind": "asha"}, {"measure": {"repeats": 3}}, "search.scheduler", "measure.sequential"),
    ({"kind": "asha"}, {"objective": "p99_ttft_ms"}, "search.scheduler", "output_tok_s or speedup"),
], ids=["kind", "reduction", "grace-low", "grace-high", "unknown-key", "no-rounds", "latency-objective"])
def test_a_scheduler_that_cannot_act_is_refused_at_load(space_factory: Any, scheduler: dict, extra: dict,
                                                         field: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        space_factory(_data(scheduler, **extra))
    err = caught.value
    assert err.field == field and says in str(err) and err.file and err.line
