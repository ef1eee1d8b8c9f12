"""Occupancy of a closed-loop run from its records: Little's-law mean in flight and dispatch gaps."""

from __future__ import annotations

import pytest

from autotune.bench.occupancy import Occupancy, dispatch_gaps, mean_in_flight
from autotune.bench.records import RequestRecord


def rec(i: int, start: float, end: float | None) -> RequestRecord:
    return RequestRecord(index=i, prompt_id=f"p{i}", start=start, end=end)


# Two slots over a 10 s window: slot A runs 0-4 then 4.5-10; slot B runs 0-6 then 7-9.
TWO_SLOTS = [rec(0, 0.0, 4.0), rec(1, 0.0, 6.0), rec(2, 4.5, 10.0), rec(3, 7.0, 9.0)]


def test_mean_in_flight_is_busy_slot_time_over_the_window() -> None:
    assert mean_in_flight(TWO_SLOTS) == pytest.approx((4 + 6 + 5.5 + 2) / 10)
    assert mean_in_flight([rec(0, 1.0, 3.0)]) == pytest.approx(1.0)
    assert mean_in_flight([]) is None
    assert mean_in_flight([rec(0, 0.0, 1.0), rec(1, 0.5, None)]) is None
    assert mean_in_flight([rec(0, 2.0, 2.0)]) is None


def test_dispatch_gaps_pair_the_kth_close_with_the_send_it_freed() -> None:
    # Closes 4, 6 free the slots that the sends at 4.5 and 7 fill, whichever worker sent them.
    assert dispatch_gaps(TWO_SLOTS, 2) == pytest.approx([0.5, 1.0])
    assert dispatch_gaps(TWO_SLOTS[:2], 2) == []
    assert dispatch_gaps([rec(0, 0.0, None)], 1) is None


def test_dispatch_gaps_refuse_records_that_are_not_a_closed_loop_at_that_concurrency() -> None:
    with pytest.raises(ValueError, match="more than 1 requests in flight"):
        dispatch_gaps(TWO_SLOTS, 1)
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        dispatch_gaps(TWO_SLOTS, 0)


def test_occupancy_figures() -> None:
    occ = Occupancy.of(TWO_SLOTS, 2)
    assert occ.mean_in_flight == pytest.approx(1.75)
    assert occ.gap_p50_s == pytest.approx(0.75) and occ.gap_p90_s == pytest.approx(0.95)
    assert occ.gap_max_s == pytest.approx(1.0)
    assert occ.idle_slot_share == pytest.approx(1.5 / (2 * 10))
    # No request waited for a slot: the gaps are unknown, not zero.
    first_wave = Occupancy.of(TWO_SLOTS[:2], 2)
    assert first_wave.gap_p50_s is None and first_wave.idle_slot_share == 0
