"""The GPU time record and the one count (autotune.trial.gpu_time)."""

from __future__ import annotations

import json
import math
import time

import pytest

from autotune.trial.gpu_time import (
    FLAT_NAMES,
    PARTS,
    STAGES,
    GpuTime,
    GpuTotals,
    PartClock,
    Spent,
    count,
    events_of,
    flat,
    gpus_of,
)
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult


def test_gpu_seconds_are_the_known_parts_times_the_gpus() -> None:
    rec = GpuTime(gpus=4, startup_s=60.0, warmup_s=10.5, measure_s=20.0, teardown_s=2.25)
    assert rec.wall_s == pytest.approx(92.75)
    assert rec.gpu_s == pytest.approx(4 * 92.75)
    # A start-up crash: no warm-up, no measurement; they stay unknown and add nothing.
    crashed = GpuTime(gpus=2, startup_s=12.0, teardown_s=1.0)
    assert crashed.warmup_s is None and crashed.measure_s is None
    assert crashed.gpu_s == pytest.approx(26.0)
    assert flat(crashed) == {"gpus": 2.0, "gpu_s": 26.0, "time_startup_s": 12.0, "time_warmup_s": None,
                             "time_measure_s": None, "time_teardown_s": 1.0}
    assert flat(None) == dict.fromkeys(FLAT_NAMES)


@pytest.mark.parametrize("tp, gpus", [(None, 1), (1, 1), (8, 8), ("2", 2)])
def test_the_gpus_held_are_tp_size_or_one(tp: object, gpus: int) -> None:
    assert gpus_of(tp) == gpus


@pytest.mark.parametrize("kwargs, message", [
    ({"gpus": 0}, "gpus must be >= 1"),
    ({"startup_s": -1.0}, "startup_s must be"),
    ({"measure_s": math.nan}, "measure_s must be"),
])
def test_a_bad_record_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GpuTime(**kwargs)
    with pytest.raises(ValueError, match="tp_size must be >= 1"):
        gpus_of(0)


def test_the_record_travels_with_the_result_as_json() -> None:
    rec = GpuTime(gpus=2, startup_s=3.0, warmup_s=None, measure_s=None, teardown_s=0.5)
    result = TrialResult(status=Status.FAILED, reason="crash", params={}, is_baseline=False, gpu_time=rec)
    text = json.dumps(result.to_dict())
    back = TrialResult.from_dict(json.loads(text))
    assert back.gpu_time == rec
    assert json.loads(text)["gpu_time"]["gpu_s"] == pytest.approx(7.0)
    assert TrialResult.from_dict({**json.loads(text), "gpu_time": None}).gpu_time is None


def test_the_part_clock_leaves_no_gap_and_keeps_unentered_parts_unknown() -> None:
    clock = PartClock()
    began = time.monotonic()
    clock.enter("warmup")
    time.sleep(0.05)
    clock.enter("measure")
    time.sleep(0.05)
    clock.enter("warmup")  # a second load level warms up again: the seconds add up
    time.sleep(0.02)
    clock.close()
    ended = time.monotonic()
    warm, meas = clock.seconds("warmup"), clock.seconds("measure")
    assert warm is not None and meas is not None
    assert warm >= 0.07 and meas >= 0.05
    assert warm + meas <= ended - began
    assert clock.seconds("startup") is None
    closed = warm + meas
    time.sleep(0.02)
    clock.close()  # nothing runs: nothing more is counted
    assert (clock.seconds("warmup") or 0) + (clock.seconds("measure") or 0) == closed


def test_a_transfer_moves_ended_seconds_between_parts_and_refuses_more_than_there_are() -> None:
    clock = PartClock()
    clock.enter("warmup")
    time.sleep(0.04)
    clock.enter("measure")
    warm = clock.seconds("warmup")
    assert warm is not None and warm >= 0.04
    clock.transfer(0.03, source="warmup", target="measure")
    clock.close()
    assert clock.seconds("warmup") == pytest.approx(warm - 0.03)
    assert (clock.seconds("measure") or 0) >= 0.03
    total = (clock.seconds("warmup") or 0) + (clock.seconds("measure") or 0)
    with pytest.raises(ValueError, match="cannot move"):
        clock.transfer(warm, source="warmup", target="measure")  # only warm - 0.03 is left
    with pytest.raises(ValueError, match="cannot move"):
        clock.transfer(-1.0, source="warmup", target="measure")
    assert (clock.seconds("warmup") or 0) + (clock.seconds("measure") or 0) == pytest.approx(total)


def test_closing_at_the_stop_counts_up_to_the_stop_only() -> None:
    clock = PartClock()
    clock.enter("measure")
    stop = time.monotonic()
    time.sleep(0.05)
    clock.close(at=stop)
    assert (clock.seconds("measure") or 0) < 0.05


def test_the_count_adds_parts_and_stages_to_one_total() -> None:
    events = (events_of(GpuTime(gpus=2, startup_s=60, warmup_s=10, measure_s=30, teardown_s=2), "trials")
              + events_of(GpuTime(gpus=2, startup_s=8, teardown_s=1), "trials")  # crashed at start
              + events_of(GpuTime(gpus=1, startup_s=50, warmup_s=5, measure_s=20, teardown_s=1), "baselines")
              + events_of(None, "trials")  # no server was started: nothing
              + events_of(GpuTime(gpus=2, startup_s=61, warmup_s=9, measure_s=40, teardown_s=2), "finalists")
              + [Spent("trials", "overhead", 3.0, 2), Spent("trials", "overhead", 0.5, 2)])
    totals = count(events)
    assert totals.gpu_s == pytest.approx(2 * 102 + 2 * 9 + 76 + 2 * 112 + 7)
    assert totals.by_part == pytest.approx({"startup": 120 + 16 + 50 + 122,
                                            "warmup": 20 + 5 + 18, "measure": 60 + 20 + 80,
                                            "teardown": 4 + 2 + 1 + 4, "overhead": 7})
    assert totals.by_stage == pytest.approx({"trials": 204 + 18 + 7, "baselines": 76, "finalists": 224})
    assert totals.servers == {"trials": 2, "baselines": 1, "finalists": 1}
    assert math.fsum(totals.by_part.values()) == pytest.approx(totals.gpu_s)
    assert math.fsum(totals.by_stage.values()) == pytest.approx(totals.gpu_s)
    for stage in STAGES:
        assert math.fsum(totals.split[stage].values()) == pytest.approx(totals.by_stage[stage])
    assert GpuTotals.from_dict(json.loads(json.dumps(totals.to_dict()))) == totals
    metrics = totals.metrics()
    assert metrics["gpu_s_total"] == totals.gpu_s and metrics["gpu_s_overhead"] == pytest.approx(7)
    assert metrics["servers_baselines"] == 1.0
    assert set(metrics) >= {f"gpu_s_{p}" for p in PARTS} | {f"gpu_s_{s}" for s in STAGES}


def test_an_empty_search_costs_nothing_and_bad_events_are_refused() -> None:
    totals = count([])
    assert totals.gpu_s == 0.0 and set(totals.by_part) == set(PARTS) and set(totals.by_stage) == set(STAGES)
    with pytest.raises(ValueError, match="unknown stage"):
        Spent("sweep", "startup", 1.0)
    with pytest.raises(ValueError, match="unknown part"):
        Spent("trials", "idle", 1.0)
    with pytest.raises(ValueError, match="seconds must be"):
        Spent("trials", "startup", -1.0)
