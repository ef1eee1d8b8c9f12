"""The stop rule (autotune.search.stopping): never without evidence, stops only when every
unmeasured config's upper bound is within the measured noise of the incumbent."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from autotune.search.stopping import (
    MIN_SPECULATIVE,
    REPEATS_ATTR,
    Evidence,
    Z,
    at_end,
    check,
    decide,
    study_noise,
    turned_off,
)

INCUMBENT = math.log(1000.0)


def _evidence(mu: list[float], sd: list[float], *, incumbent: float | None = INCUMBENT,
              fitted: bool = True, baselines: int = 1,
              speculative: int = MIN_SPECULATIVE) -> Evidence:
    return Evidence(mu=np.array(mu), sd=np.array(sd), incumbent=incumbent, fitted=fitted,
                    baselines=baselines, speculative=speculative)


def _below(pct: float) -> float:
    """A log tok/s ``pct`` below the incumbent."""
    return INCUMBENT + math.log1p(-pct)


def test_stops_when_every_bound_is_below_the_incumbent() -> None:
    # Bounds: 0.95 * 1000 * e^(2 * 0.01) ~ 969 and 0.90 * 1000 * e^0.02 ~ 918: both below.
    d = decide(_evidence([_below(0.05), _below(0.10)], [0.01, 0.01]), noise=0.01, trials=5,
               budget=12)
    assert d.stop and d.applies
    assert d.upper_gap is not None and d.upper_gap == pytest.approx(0.95 * math.exp(Z * 0.01) - 1)
    assert d.reason == ("stopped after 5 of 12 trials: the best unmeasured config's upper bound is "
                        f"{abs(d.upper_gap) * 100:.1f}% below the incumbent")


def test_one_config_whose_bound_is_above_keeps_the_search_going() -> None:
    # The second config's bound, 0.99 * e^(2 * 0.02) ~ 1.030, is 3% above: beyond 1% noise.
    d = decide(_evidence([_below(0.10), _below(0.01)], [0.01, 0.02]), noise=0.01, trials=5,
               budget=12)
    assert not d.stop
    assert d.upper_gap == pytest.approx(0.99 * math.exp(0.04) - 1)
    assert "above the incumbent, beyond the measured noise 1.0%" in d.reason


def test_a_bound_above_but_within_the_measured_noise_stops_and_no_noise_allows_no_margin() -> None:
    # Bound 1.005x the incumbent: within 1% noise, but not with no measured noise.
    ev = _evidence([INCUMBENT + math.log(1.005)], [0.0])
    assert decide(ev, noise=0.01, trials=6, budget=12).stop
    assert "within the measured noise 1.0%" in decide(ev, noise=0.01, trials=6, budget=12).reason
    unmeasured = decide(ev, noise=None, trials=6, budget=12)
    assert not unmeasured.stop and "beyond no measured noise" in unmeasured.reason


@pytest.mark.parametrize("evidence, why", [
    (_evidence([_below(0.5)], [0.01], fitted=False), "the model is not fitted yet"),
    (_evidence([_below(0.5)], [0.01], incumbent=None), "no baseline and no feasible config"),
    (_evidence([_below(0.5)], [0.01], baselines=0), "no baseline and no feasible config"),
    (_evidence([_below(0.5)], [0.01], speculative=MIN_SPECULATIVE - 1),
     f"{MIN_SPECULATIVE - 1} of the {MIN_SPECULATIVE} speculative configs"),
    (_evidence([_below(0.5), float("nan")], [0.01, float("inf")]), "1 unmeasured config(s) have no bound"),
])
def test_no_stop_without_evidence(evidence: Evidence, why: str) -> None:
    # Every config here is 50% below the incumbent: only the missing evidence keeps it going.
    d = decide(evidence, noise=0.01, trials=3, budget=12)
    assert not d.stop
    assert d.reason.startswith("going on after 3 of 12 trials: ") and why in d.reason


def test_nothing_left_unmeasured_stops() -> None:
    d = decide(_evidence([], []), noise=0.01, trials=9, budget=20)
    assert d.stop and d.upper_gap is None
    assert d.reason == "stopped after 9 of 20 trials: every config expected to run has been measured"


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="noise"):
        decide(_evidence([INCUMBENT], [0.01]), noise=-0.1, trials=1, budget=2)
    with pytest.raises(ValueError, match="shape"):
        decide(_evidence([INCUMBENT], [0.01, 0.02]), noise=0.01, trials=1, budget=2)


def test_a_sampler_without_bounds_runs_its_budget() -> None:
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
    d = check(study.sampler, study, sampler_name="tpe", noise=0.01, trials=4, budget=8)
    assert not d.stop and not d.applies and d.setting == "not applicable"
    assert d.reason == "the stop rule does not apply to sampler tpe (it gives no bound): 4 of 8 trials run"
    assert at_end(d, trials=8, budget=8).reason.endswith(": 8 of 8 trials run")


def test_turned_off_and_the_end_of_a_budget_say_so() -> None:
    off = turned_off(trials=2, budget=8)
    assert off.setting == "off" and not off.stop
    assert at_end(off, trials=8, budget=8).reason == ("the stop rule is off (search.stop_rule: false): "
                                                      "8 of 8 trials run")
    going = decide(_evidence([_below(0.01)], [0.02]), noise=0.01, trials=7, budget=8)
    end = at_end(going, trials=8, budget=8)
    assert end.reason.startswith("ran 8 of 8 trials, the rule never stopped; last: the best unmeasured")
    stopped = decide(_evidence([_below(0.2)], [0.01]), noise=0.01, trials=5, budget=8)
    assert at_end(stopped, trials=5, budget=8) == stopped
    # Trials already running when the rule stopped end after it: the line counts them too.
    late = at_end(stopped, trials=6, budget=8)
    assert late.reason == stopped.reason.replace(
        "stopped after 5 of 8 trials", "stopped after 5 of 8 trials (1 more, running then, ended after it: 6 in all)")
    assert late.stop and late.trials == 5 and late.upper_gap == stopped.upper_gap


def test_study_noise_pools_the_repeats_of_finished_trials() -> None:
    study = optuna.create_study(direction="maximize")
    assert study_noise(study) is None  # nothing measured: unknown, not zero
    for reps in ([100.0, 102.0, 98.0], [50.0, 51.0], [70.0]):  # one repeat carries no spread
        trial = study.ask()
        trial.set_user_attr(REPEATS_ATTR, reps)
        study.tell(trial, reps[0])
    logs = [np.log([100.0, 102.0, 98.0]), np.log([50.0, 51.0])]
    ss = sum(float(((v - v.mean()) ** 2).sum()) for v in logs)
    assert study_noise(study) == pytest.approx(math.sqrt(ss / 3))
