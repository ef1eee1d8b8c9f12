"""The sequential decision rule (autotune.trial.sequential): one reading never decides, a clearly
worse config stops after min_rounds, a clearly better one needs no more, a close one runs to the cap,
and the rule's error rate holds what its confidence promises."""

from __future__ import annotations

import math
import random

import pytest

from autotune.trial.sequential import (
    Decision,
    Evidence,
    SequentialRule,
    decide,
    margin,
    pooled_noise,
    readings_of,
    t_quantile,
)

RULE = SequentialRule(min_rounds=2, max_rounds=6, confidence=0.95)
INCUMBENT = Evidence(readings=(1000.0, 1008.0, 995.0), label="inc")


def _draws(mean: float, cv: float, n: int, rng: random.Random) -> list[float]:
    return [mean * math.exp(rng.gauss(0.0, cv)) for _ in range(n)]


@pytest.mark.parametrize(("p", "df", "expected"), [(0.975, 1, 12.7062), (0.975, 4, 2.7764),
                                                     (0.995, 10, 3.1693), (0.975, 1000, 1.9623)])
def test_t_quantile_matches_the_tables(p: float, df: int, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-3)


def test_one_reading_never_decides_however_far_it_is() -> None:
    for reading in (1.0, 500.0, 1000.0, 5000.0, 1e6):
        assert decide([reading], incumbent=INCUMBENT, rule=RULE) is Decision.CONTINUE
    with pytest.raises(ValueError, match="min_rounds must be >= 2"):
        SequentialRule(min_rounds=1, max_rounds=3, confidence=0.95)


def test_a_clearly_worse_config_stops_after_min_rounds() -> None:
    assert decide([800.0], incumbent=INCUMBENT, rule=RULE) is Decision.CONTINUE
    assert decide([800.0, 806.0], incumbent=INCUMBENT, rule=RULE) is Decision.STOP_WORSE
    # Minimising (a latency), lower is better: the same readings are clearly better.
    assert decide([800.0, 806.0], incumbent=INCUMBENT, rule=RULE, maximize=False) is Decision.STOP_BETTER


def test_a_clearly_better_config_needs_no_more() -> None:
    assert decide([1200.0, 1195.0], incumbent=INCUMBENT, rule=RULE) is Decision.STOP_BETTER
    assert Decision.STOP_BETTER.early and Decision.STOP_WORSE.early and not Decision.STOP_CAP.early


def test_a_close_config_runs_to_the_cap() -> None:
    rng = random.Random(7)
    incumbent = Evidence(readings=tuple(_draws(1000.0, 0.01, 3, rng)))
    readings: list[float] = []
    decisions = []
    while True:
        readings.append(1003.0 * math.exp(rng.gauss(0.0, 0.01)))
        decisions.append(decide(readings, incumbent=incumbent, rule=RULE))
        if decisions[-1] is not Decision.CONTINUE:
            break
    assert decisions == [Decision.CONTINUE] * 5 + [Decision.STOP_CAP]


def test_without_an_incumbent_a_config_measures_min_rounds() -> None:
    assert decide([1000.0], incumbent=None, rule=RULE) is Decision.CONTINUE
    assert decide([1000.0, 1010.0], incumbent=None, rule=RULE) is Decision.STOP_ALONE


def test_readings_that_measured_nothing_are_no_evidence() -> None:
    # A round with no tok/s (None, 0, NaN) does not count towards min_rounds.
    assert decide([800.0, 0.0, math.nan], incumbent=INCUMBENT, rule=RULE) is Decision.CONTINUE


def test_other_configs_noise_sharpens_a_decision_two_readings_alone_cannot_take() -> None:
    # 3.5% apart, with two readings each spread 1.5-2%: one degree of freedom a side is not enough at 95% ...
    a, b = [955.0, 975.0], (1000.0, 1015.0)
    assert decide(a, incumbent=Evidence(readings=b), rule=RULE) is Decision.CONTINUE
    # ... but the search's other configs show the noise is 0.5%: 20 more degrees of freedom.
    rng = random.Random(3)
    others = [_draws(x, 0.005, 3, rng) for x in (700.0, 800.0, 900.0, 1100.0, 1200.0, 600.0, 650.0,
                                                750.0, 850.0, 950.0)]
    noise = pooled_noise(others)
    assert noise[1] == 20
    assert decide(a, incumbent=Evidence(readings=b, noise=noise), rule=RULE) is Decision.STOP_WORSE


def test_equal_configs_are_stopped_on_a_side_at_most_as_often_as_the_confidence_allows() -> None:
    # The whole trial (every look) errs at most 1 - confidence: equal true means, 1% noise.
    rng = random.Random(11)
    wrong, runs = 0, 1500
    for _ in range(runs):
        incumbent = Evidence(readings=tuple(_draws(1000.0, 0.01, 3, rng)))
        readings: list[float] = []
        while True:
            readings.append(1000.0 * math.exp(rng.gauss(0.0, 0.01)))
            d = decide(readings, incumbent=incumbent, rule=RULE)
            if d is not Decision.CONTINUE:
                wrong += d.early
                break
    assert wrong / runs <= 1 - RULE.confidence


def test_the_rule_checks_its_bounds() -> None:
    with pytest.raises(ValueError, match="max_rounds"):
        SequentialRule(min_rounds=4, max_rounds=3, confidence=0.95)
    with pytest.raises(ValueError, match="confidence"):
        SequentialRule(min_rounds=2, max_rounds=3, confidence=1.0)
    # Bonferroni over the looks a trial can take: 5 looks share 5%.
    assert RULE.look_confidence == pytest.approx(0.99)


def test_margin_states_the_ratio_and_whether_it_is_separated() -> None:
    clear = margin([1100.0, 1104.0, 1098.0], [1000.0, 1008.0, 995.0], confidence=0.95)
    assert clear is not None and clear.separated
    assert clear.ratio == pytest.approx(1.0997, abs=1e-3)
    assert clear.low is not None and clear.high is not None and 1 < clear.low < clear.ratio < clear.high
    close = margin([1003.0, 990.0, 1011.0], [1000.0, 1008.0, 995.0], confidence=0.95)
    assert close is not None and not close.separated and close.low is not None and close.low < 1
    # One reading each: a ratio, no interval, never separated.
    single = margin([1100.0], [1000.0], confidence=0.95)
    assert single is not None and single.low is None and not single.separated
    assert margin([], [1000.0], confidence=0.95) is None


def test_readings_are_the_objective_per_round() -> None:
    assert readings_of("output_tok_s", [100.0, 110.0], baseline_tok_s=None) == [100.0, 110.0]
    assert readings_of("speedup", [100.0, 110.0], baseline_tok_s=50.0) == [2.0, 2.2]
    # A speedup without its baseline, or a latency objective, has no per-round reading here.
    assert readings_of("speedup", [100.0], baseline_tok_s=None) is None
    assert readings_of("ttft_ms_p99", [100.0], baseline_tok_s=50.0) is None


def test_evidence_read_back_keeps_only_usable_readings() -> None:
    ev = Evidence(readings=(1.0, 2.0), label="t1", noise=(0.5, 3))
    assert Evidence.from_dict(ev.to_dict()) == ev
    assert Evidence.from_dict({"readings": [None, -1, "x"]}) is None
    assert Evidence.from_dict("junk") is None
    assert Evidence.from_dict({"readings": [1.0], "noise": "bad"}) == Evidence(readings=(1.0,))
