"""GPU telemetry (autotune.profile.telemetry, autotune.profile.nvml) against a fake NVML.

The sampler runs on scripted GPUs (``tests/fakes/fake_pynvml.py``) whose readings follow a fake
clock, so every figure is known exactly: most tests take the samples themselves
(``background=False``), one lets the thread sample and waits for its reads. The last test runs a
real emulator trial with the fake NVML in the measuring process.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from autotune.profile.nvml import NvmlSampler, open_sampler
from autotune.profile.telemetry import GIB, GpuWindow, NullSampler, trial_figures, visible_devices
from autotune.space.workload import Workload
from autotune.tracking.content import trial_metrics
from autotune.trial.measure import measure
from tests.fakes.fake_pynvml import FakeClock, FakeGpu, NVMLError, make_module
from tests.integration.test_trial_integration import chain, settings, sim_space

TELEMETRY = ("gpu_util_pct_mean", "gpu_mem_peak_gib", "gpu_power_w_mean", "gpu_energy_j",
             "tok_s_per_w", "j_per_token")


def sampler_on(gpus: list[FakeGpu], clock: FakeClock) -> NvmlSampler:
    nv = make_module(gpus, clock)
    return NvmlSampler(nv, gpus, devices=[g.uuid for g in gpus], interval_s=1.0, clock=clock,
                       background=False)


def window_at(sampler: NvmlSampler, clock: FakeClock, times: list[float]) -> GpuWindow:
    """Open at times[0], sample at the middle times, close at times[-1]."""
    clock.now = times[0]
    sampler.start()
    for t in times[1:-1]:
        clock.now = t
        sampler.sample()
    clock.now = times[-1]
    return sampler.stop()


# ----- the NVML sampler ---------------------------------------------------------------------------
def test_energy_comes_from_the_counter_difference_summed_over_the_gpus() -> None:
    clock = FakeClock(10.0)
    # The counters say 150 W and 250 W; the power readings (1 s averages on real GPUs) say less,
    # so a figure that matches the counters came from them.
    gpus = [FakeGpu("GPU-a", power_w=lambda t: 100.0, energy_j=lambda t: 5000 + 150 * t),
            FakeGpu("GPU-b", power_w=lambda t: 200.0, energy_j=lambda t: 9000 + 250 * t)]
    w = window_at(sampler_on(gpus, clock), clock, [10.0, 11.0, 12.0])
    assert w.energy_source == "counter" and w.samples == 3
    assert w.duration_s == pytest.approx(2.0)
    assert w.energy_j == pytest.approx((150 + 250) * 2.0)
    assert w.power_w_mean == pytest.approx(400.0)


def test_utilisation_is_the_mean_over_samples_and_gpus_and_memory_the_peak_of_any_gpu() -> None:
    clock = FakeClock()
    gpus = [FakeGpu("GPU-a", util=lambda t: 50 + 20 * t, mem_gib=lambda t: {0: 8, 1: 10, 2: 9}[t],
                    energy_j=lambda t: 0.0),
            FakeGpu("GPU-b", util=lambda t: 10 + 20 * t, mem_gib=lambda t: {0: 8, 1: 9, 2: 12}[t],
                    energy_j=lambda t: 0.0)]
    w = window_at(sampler_on(gpus, clock), clock, [0.0, 1.0, 2.0])
    # Per-sample means over the two GPUs: 30, 50, 70.
    assert w.util_pct_mean == pytest.approx(50.0) and w.util_pct_max == pytest.approx(90.0)
    assert w.mem_peak_bytes == 12 * GIB
    # A counter that did not move is 0 J measured, not unknown.
    assert w.energy_j == 0.0 and w.energy_source == "counter"


def test_without_an_energy_counter_power_is_integrated_and_the_counter_is_not_asked_again() -> None:
    clock = FakeClock()
    gpu = FakeGpu("GPU-a", power_w=lambda t: {0: 100, 1: 300, 2: 100, 3: 100, 4: 500}[t])
    sampler = sampler_on([gpu], clock)
    w = window_at(sampler, clock, [0.0, 1.0, 2.0])
    assert w.energy_source == "power"
    assert w.energy_j == pytest.approx((100 + 300) / 2 + (300 + 100) / 2)
    assert w.power_w_mean == pytest.approx(200.0)
    assert "integrated" in (sampler.note or "")
    asked = gpu.reads["energy"]
    w2 = window_at(sampler, clock, [2.0, 3.0, 4.0])
    assert gpu.reads["energy"] == asked  # NotSupported once: not asked twice a window forever
    assert w2.energy_source == "power" and w2.energy_j == pytest.approx(100 + 300)


def test_a_failed_power_read_is_bridged_and_a_counter_going_backwards_falls_back() -> None:
    clock = FakeClock()
    # The counter resets mid-window (a driver reload): its difference would be negative.
    gpu = FakeGpu("GPU-a", power_w=lambda t: 200.0, energy_j=lambda t: 1e6 if t < 1 else 10.0,
                  fail_power_at={1.0})
    sampler = sampler_on([gpu], clock)
    w = window_at(sampler, clock, [0.0, 1.0, 2.0])
    assert sampler.read_errors == 1
    assert w.energy_source == "power" and w.energy_j == pytest.approx(400.0)


def test_with_every_power_read_failing_energy_is_unknown_not_zero() -> None:
    clock = FakeClock()
    gpu = FakeGpu("GPU-a", fail_power_at={0.0, 1.0})
    w = window_at(sampler_on([gpu], clock), clock, [0.0, 1.0])
    assert w.energy_j is None and w.power_w_mean is None and w.energy_source is None
    assert w.util_pct_mean == 0.0  # what did answer is known


def test_the_background_thread_samples_until_stopped() -> None:
    clock = FakeClock()
    seen = threading.Event()
    gpu = FakeGpu("GPU-a", util=lambda t: 40.0, energy_j=lambda t: 0.0,
                  on_read=lambda g: g.reads.get("util", 0) >= 4 and seen.set())
    nv = make_module([gpu], clock)
    sampler = NvmlSampler(nv, [gpu], devices=["GPU-a"], interval_s=0.01, clock=clock)
    sampler.start()
    assert seen.wait(timeout=60), "the sampling thread never read the GPU"
    w = sampler.stop()
    assert w.samples >= 5 and w.util_pct_mean == pytest.approx(40.0)
    assert not any(t.name == "autotune-nvml" for t in threading.enumerate())
    reads = gpu.reads["util"]
    sampler.close()
    assert gpu.reads["util"] == reads and nv.state["shutdowns"] == 1


def test_windows_must_open_and_close_in_turn() -> None:
    clock = FakeClock()
    sampler = sampler_on([FakeGpu("GPU-a")], clock)
    with pytest.raises(ValueError):
        sampler.stop()
    sampler.start()
    with pytest.raises(ValueError):
        sampler.start()


# ----- which GPUs ----------------------------------------------------------------------------------
def four_gpus() -> list[FakeGpu]:
    return [FakeGpu(f"GPU-{i}{i}{i}-uuid", power_w=lambda t, i=i: 100.0 * (i + 1),
                    energy_j=lambda t, i=i: 1000.0 * (i + 1) * t) for i in range(4)]


@pytest.mark.parametrize(("visible", "picked"), [
    ("2,3", [2, 3]), ("3", [3]), (None, [0, 1, 2, 3]), ("GPU-111-uuid,GPU-0", [1, 0]),
    ("1,-1,2", [1])])
def test_the_servers_cuda_visible_devices_pick_the_nvml_devices(
        monkeypatch: pytest.MonkeyPatch, visible: str | None, picked: list[int]) -> None:
    gpus, clock = four_gpus(), FakeClock()
    nv = make_module(gpus, clock)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    with open_sampler(env=env, wanted=None, needs_gpus=True) as sampler:
        assert isinstance(sampler, NvmlSampler)
        assert list(sampler.devices) == [gpus[i].uuid for i in picked]
        sampler._clock = clock  # the window's ends on the fake clock
        sampler._background = False
        w = window_at(sampler, clock, [0.0, 1.0])
    # Tensor parallel: energy is summed over the server's GPUs, and only over those.
    assert w.energy_j == pytest.approx(sum(1000.0 * (i + 1) for i in picked))
    assert nv.state == {"inits": 1, "shutdowns": 1}


def test_unset_cuda_visible_devices_counts_every_gpu_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", make_module(four_gpus(), FakeClock()))
    with open_sampler(env={}, wanted=True, needs_gpus=True, server_gpus=2) as sampler:
        assert len(sampler.devices) == 4 and "all 4 GPUs are counted" in (sampler.note or "")
    with open_sampler(env={"CUDA_VISIBLE_DEVICES": "0,1"}, wanted=True, needs_gpus=True,
                      server_gpus=2) as sampler:
        assert sampler.note is None


@pytest.mark.parametrize(("visible", "why"), [("", "no GPU"), ("-1", "no GPU"),
                                              ("7", "not NVML devices"), ("GPU-", "matches 4"),
                                              ("MIG-abc", "MIG")])
def test_gpus_nvml_cannot_watch_give_the_null_sampler(
        monkeypatch: pytest.MonkeyPatch, visible: str, why: str) -> None:
    nv = make_module(four_gpus(), FakeClock())
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    sampler = open_sampler(env={"CUDA_VISIBLE_DEVICES": visible}, wanted=True, needs_gpus=True)
    assert isinstance(sampler, NullSampler) and why in (sampler.note or "")
    assert nv.state["inits"] == nv.state["shutdowns"]


def test_visible_devices_reads_cuda_visible_devices_as_cuda_does() -> None:
    assert visible_devices(None) is None
    assert visible_devices("") == [] and visible_devices("-1") == []
    assert visible_devices(" 0, 1 ") == ["0", "1"]
    assert visible_devices("0,x,1") == ["0"]
    assert visible_devices("GPU-abc,MIG-def") == ["GPU-abc", "MIG-def"]


# ----- the null sampler ------------------------------------------------------------------------------
def test_without_pynvml_every_figure_is_none_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    sampler = open_sampler(env={}, wanted=None, needs_gpus=True)
    assert isinstance(sampler, NullSampler) and "pynvml" in (sampler.note or "")
    sampler.start()
    w = sampler.stop()
    assert w == GpuWindow() and w.energy_j is None and w.samples == 0
    figures = trial_figures([w, w], [100, 100])
    assert figures == dict.fromkeys(TELEMETRY)


def test_a_failing_nvml_init_gives_the_null_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = make_module(four_gpus(), FakeClock(), init_error=NVMLError("Driver Not Loaded"))
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    sampler = open_sampler(env={}, wanted=True, needs_gpus=True)
    assert isinstance(sampler, NullSampler) and "Driver Not Loaded" in (sampler.note or "")


def test_the_emulator_samples_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = make_module(four_gpus(), FakeClock())
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    assert "no GPU" in (open_sampler(env={}, wanted=None, needs_gpus=False).note or "")
    assert "off" in (open_sampler(env={}, wanted=False, needs_gpus=True).note or "")
    assert nv.state["inits"] == 0
    with pytest.raises(ValueError):
        open_sampler(env={}, wanted=True, needs_gpus=False, interval_s=0)


# ----- the trial's figures ------------------------------------------------------------------------
def test_trial_figures_are_over_all_measured_repeats_and_unknown_if_one_is() -> None:
    a = GpuWindow(duration_s=2.0, samples=3, util_pct_mean=60.0, mem_peak_bytes=10 * GIB,
                  energy_j=800.0, energy_source="counter", power_w_mean=400.0)
    b = GpuWindow(duration_s=3.0, samples=4, util_pct_mean=80.0, mem_peak_bytes=12 * GIB,
                  energy_j=900.0, energy_source="counter", power_w_mean=300.0)
    f = trial_figures([a, b], [1000, 700])
    assert f["gpu_energy_j"] == pytest.approx(1700.0)
    assert f["gpu_power_w_mean"] == pytest.approx(1700.0 / 5.0)
    assert f["gpu_util_pct_mean"] == pytest.approx((60 * 2 + 80 * 3) / 5.0)
    assert f["gpu_mem_peak_gib"] == pytest.approx(12.0)
    assert f["j_per_token"] == pytest.approx(1.0)
    assert f["tok_s_per_w"] == pytest.approx(1.0)
    partial = trial_figures([a, GpuWindow(duration_s=3.0, util_pct_mean=80.0)], [1000, 700])
    assert partial["gpu_energy_j"] is None and partial["j_per_token"] is None
    assert partial["tok_s_per_w"] is None and partial["gpu_power_w_mean"] is None
    assert partial["gpu_util_pct_mean"] == pytest.approx((60 * 2 + 80 * 3) / 5.0)
    assert trial_figures([a], [None])["j_per_token"] is None
    with pytest.raises(ValueError):
        trial_figures([a], [1, 2])


# ----- end to end, on the emulator -------------------------------------------------------------
def test_an_emulator_trial_with_nvml_records_telemetry_and_logs_it_to_mlflow(
        sim_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    # Each read of the counter is 500 J on from the last: every window is exactly 500 J, whatever
    # the real clock does on a loaded box.
    counter = {"GPU-bb": 0.0}

    def energy(_t: float) -> float:
        counter["GPU-bb"] += 500.0
        return counter["GPU-bb"]

    gpus = [FakeGpu("GPU-aa", util=lambda t: 10.0, mem_gib=lambda t: 70.0, energy_j=lambda t: 0.0),
            FakeGpu("GPU-bb", util=lambda t: 80.0, mem_gib=lambda t: 20.0, energy_j=energy)]
    monkeypatch.setitem(sys.modules, "pynvml", make_module(gpus, clock))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # Ray's choice: the server's one GPU
    space = sim_space()
    result = measure(space.trial_config(chain(3)), Workload.from_spec(space.workload),
                     settings(tmp_path, repeats=2, gpu_telemetry=True))
    assert result.ok, result.reason
    tel = result.gpu_telemetry or {}
    assert tel["source"] == "nvml" and tel["devices"] == ["GPU-bb"]
    assert tel["energy_source"] == "counter" and tel["samples"] >= 4 and tel["window_s"] > 0
    tokens = sum(r["completion_tokens"] for r in result.records)
    assert tokens > 0
    assert result.gpu_energy_j == pytest.approx(1000.0)
    assert result.gpu_power_w_mean == pytest.approx(1000.0 / tel["window_s"])
    assert result.gpu_util_pct_mean == pytest.approx(80.0)
    assert result.gpu_mem_peak_gib == pytest.approx(20.0, abs=1e-6)  # GPU-aa's 70 is not ours
    assert result.j_per_token == pytest.approx(1000.0 / tokens)
    assert result.tok_s_per_w == pytest.approx(tokens / 1000.0)
    assert [r["gpu_energy_j"] for r in result.repeat_breakdown] == pytest.approx([500.0, 500.0])
    metrics = trial_metrics(result)
    for name in TELEMETRY:
        assert metrics[name] == pytest.approx(getattr(result, name)), name
    # The same figures survive the JSON round trip that takes results between processes.
    again = type(result).from_dict(result.to_dict())
    assert again.j_per_token == result.j_per_token and again.gpu_telemetry == tel


def test_trial_metrics_leave_unknown_telemetry_out() -> None:
    from autotune.trial.result import TrialResult

    result = TrialResult(status="ok", reason=None, params={}, is_baseline=True, output_tok_s=10.0,
                         gpu_energy_j=0.0)
    metrics = trial_metrics(result)
    assert metrics["gpu_energy_j"] == 0.0  # a measured 0 is logged
    assert not {"gpu_power_w_mean", "j_per_token", "tok_s_per_w"} & set(metrics)
