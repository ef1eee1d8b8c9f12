"""Where a measured trial's GPU time went, against real emulator servers (autotune.trial.measure).

Every path pays: a trial that measured, one whose server crashed at start-up (start-up and
teardown, nothing else) and one that crashed mid-measurement.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autotune.space.workload import Workload
from autotune.trial.measure import measure
from autotune.trial.outcome import Status
from tests.integration.test_trial_integration import KIMI, SMALL_WORKLOAD, baseline, chain, settings, sim_space

# slow: real emulator servers
pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_a_measured_trial_records_every_part_and_its_gpus(sim_env: Path, tmp_path: Path) -> None:
    space = sim_space(tp_choices=(2,))
    began = time.monotonic()
    result = measure(space.trial_config(chain(3, tp=2)), Workload.from_spec(space.workload),
                     settings(tmp_path, repeats=2, warmup_until_stable_pct=50.0))
    elapsed = time.monotonic() - began
    assert result.ok, result.reason
    rec = result.gpu_time
    assert rec is not None and rec.gpus == 2
    parts = [rec.startup_s, rec.warmup_s, rec.measure_s, rec.teardown_s]
    assert all(p is not None and p > 0 for p in parts), parts
    assert rec.startup_s is not None and rec.startup_s >= 0.2  # the emulator's start-up (sim_env)
    # The measurement holds both measured repeats; the server's whole life fits in the call.
    assert rec.measure_s is not None
    assert rec.measure_s >= sum(r["wall_s"] for r in result.repeat_breakdown)
    assert rec.wall_s <= elapsed
    assert rec.gpu_s == pytest.approx(2 * rec.wall_s)


def test_the_stable_warm_up_pass_is_the_first_round_and_an_unstable_one_gives_none(
        sim_env: Path, tmp_path: Path) -> None:
    space = sim_space()
    # 50%: the emulator's first two passes always agree, so the second is kept as round 1.
    kept = measure(space.trial_config(chain(3)), Workload.from_spec(space.workload),
                   settings(tmp_path / "a", repeats=2, warmup_until_stable_pct=50.0))
    assert kept.ok, kept.reason
    assert kept.warmup_stable is True and len(kept.warmup_tok_s) == 2
    rounds = kept.repeat_breakdown
    assert len(rounds) == 2
    assert rounds[0]["tok_s"] == kept.warmup_tok_s[-1]  # the same pass, not a fresh one
    assert rounds[1]["tok_s"] != kept.warmup_tok_s[-1]
    rec = kept.gpu_time
    assert rec is not None and rec.measure_s is not None
    assert rec.measure_s >= sum(r["wall_s"] for r in rounds)  # the kept pass counts as measurement
    # 0.0001%: two passes never agree that closely; neither is a round, both rounds are fresh.
    fresh = measure(space.trial_config(chain(3)), Workload.from_spec(space.workload),
                    settings(tmp_path / "b", repeats=2, warmup_until_stable_pct=0.0001, warmup_max_rounds=2))
    assert fresh.ok, fresh.reason
    assert fresh.warmup_stable is False and len(fresh.warmup_tok_s) == 2
    assert len(fresh.repeat_breakdown) == 2
    assert all(r["tok_s"] not in fresh.warmup_tok_s for r in fresh.repeat_breakdown)


def test_a_crash_at_start_up_pays_start_up_and_teardown_only(sim_env: Path, tmp_path: Path) -> None:
    # Kimi-K2.5's ~600 GiB of weights do not fit on 4 of its 96 GiB GPUs: out of memory at start.
    space = sim_space(KIMI, tp_choices=(4, 8))
    result = measure(space.trial_config(baseline(tp=4)), Workload.from_spec(space.workload),
                     settings(tmp_path))
    assert result.status == Status.FAILED and result.failure == "oom"
    rec = result.gpu_time
    assert rec is not None and rec.gpus == 4
    assert rec.startup_s is not None and rec.startup_s > 0 and rec.teardown_s is not None
    assert rec.warmup_s is None and rec.measure_s is None  # never reached: unknown, not 0
    assert rec.gpu_s == pytest.approx(4 * (rec.startup_s + rec.teardown_s))
    assert result.to_dict()["gpu_time"]["warmup_s"] is None


def test_a_crash_mid_measurement_keeps_what_it_measured(
        sim_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_SIM_FAULT", "crash_after_requests:3")
    space = sim_space(workload={**SMALL_WORKLOAD, "num_prompts": 5})
    result = measure(space.trial_config(chain(3)), Workload.from_spec(space.workload), settings(tmp_path))
    assert result.status == Status.FAILED and result.failure == "crash_during_measurement"
    rec = result.gpu_time
    assert rec is not None and rec.gpus == 1
    assert all(v is not None for v in (rec.startup_s, rec.warmup_s, rec.measure_s, rec.teardown_s))
    assert rec.measure_s is not None and rec.measure_s > 0


def test_a_refused_launch_starts_no_server_and_records_none(sim_env: Path, tmp_path: Path) -> None:
    space = sim_space()
    config = space.trial_config(chain(3))
    bad = type(config)(**{**config.__dict__, "server_args": {**config.server_args, "no_such_arg_xyz": 1}})
    result = measure(bad, Workload.from_spec(space.workload), settings(tmp_path, validate=True))
    assert result.status == Status.FAILED
    assert result.gpu_time is None
