"""Which window's tok/s speaks for a trial (autotune.trial.window.objective_rates)."""

from __future__ import annotations

import pytest

from autotune.bench.records import BenchResult
from autotune.profile.load import LoadWindow
from autotune.trial.measure_settings import MeasureSettings, settings_for
from autotune.trial.window import STEADY, WHOLE, objective_rates
from tests.conftest import SpaceFactory
from tests.unit.bench.test_steady import closed_loop, one_short_wave


def bench(n: int, concurrency: int, *, cap: int | None = None, request_rate: float | None = None) -> BenchResult:
    return BenchResult.from_records(closed_loop(n, concurrency, cap=cap), api="generate",
                                    concurrency=concurrency, request_rate=request_rate)


def load(asked: int | None, cap: int | None) -> LoadWindow:
    return LoadWindow(asked=asked, cap=cap, running_max=None, running_p50=None, queued_max=None,
                      queued_p50=None, queued_share=None, server_tail_share=None, client_tail_share=None,
                      samples=0)


def test_steady_speaks_at_batch_and_the_whole_window_is_kept_beside_it() -> None:
    benches = [bench(100, 16), bench(90, 16)]
    chosen = objective_rates(benches, [], window=STEADY)
    assert chosen.window == STEADY and chosen.reason is None
    assert chosen.whole == [b.output_tok_s for b in benches]
    assert chosen.rates == [s.tok_s for s in chosen.steady] and all(s.level == 16 for s in chosen.steady)
    assert all(r > w for r, w in zip(chosen.rates, chosen.whole, strict=True))
    assert chosen.steady_median("waves") is not None


def test_the_servers_cap_is_the_full_load() -> None:
    chosen = objective_rates([bench(120, 16, cap=12)], [load(16, 12)], window=STEADY)
    assert chosen.window == STEADY and chosen.steady[0].level == 12
    assert chosen.rates[0] == pytest.approx(12 * 20 / 0.24, rel=0.03)


def test_the_whole_window_speaks_when_asked_at_concurrency_1_in_an_open_loop_or_when_steady_is_short() -> None:
    asked = objective_rates([bench(100, 16)], [], window=WHOLE)
    assert (asked.window, asked.reason, asked.steady) == (WHOLE, None, [])
    assert asked.rates == asked.whole
    one = objective_rates([bench(8, 1)], [], window=STEADY)
    assert one.window == WHOLE and one.reason == "concurrency 1: no ramp or tail to leave out"
    rate = objective_rates([bench(40, 16, request_rate=4.0)], [], window=STEADY)
    assert rate.window == WHOLE and rate.reason is not None and "open loop" in rate.reason
    # One repeat too short to hold a steady wave: every repeat falls back, so no median mixes the two.
    cut = BenchResult.from_records(one_short_wave(), api="generate", concurrency=16)
    short = objective_rates([bench(100, 16), cut], [], window=STEADY)
    assert short.window == WHOLE and short.rates == short.whole
    assert short.reason is not None and short.reason.startswith("repeat 2: the steady interval spans")
    assert short.steady[0].usable and not short.steady[1].usable
    with pytest.raises(ValueError, match="window must be one of steady, whole"):
        objective_rates([], [], window="tail")


def test_the_space_chooses_the_window_and_steady_is_the_default(space_factory: SpaceFactory) -> None:
    assert settings_for(space_factory()).window == STEADY
    assert settings_for(space_factory(measure={"window": "whole"})).window == WHOLE
    with pytest.raises(ValueError, match="window must be one of steady, whole"):
        MeasureSettings(window="tail")
