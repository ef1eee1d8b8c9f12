"""GPU telemetry over a trial's measured windows: utilisation, peak memory, power and energy.

A :class:`GpuSampler` is started just before a measured repeat's first request and stopped after
its last response; :meth:`GpuSampler.stop` returns that window's :class:`GpuWindow`.
:func:`autotune.profile.nvml.open_sampler` is the one place that decides whether a trial samples
at all and which GPUs: the NVML sampler (``nvidia-ml-py``) on the GPUs the server sees, or
:class:`NullSampler`, whose windows are all unknown (None, never 0) and whose ``note`` says why.
:func:`trial_figures` and :func:`repeat_figures` turn windows into the trial's metrics, so the
result, its repeat breakdown and MLflow share one definition (``docs/search-spaces.md``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Sequence, TypeGuard, TypeVar

_T = TypeVar("_T")

GIB = float(2 ** 30)
SAMPLE_INTERVAL_S = 0.15
"""Between background samples: NVML's utilisation is itself averaged over 1/6-1 s, and the energy
comes from a counter read at the window's two ends, so sampling faster buys nothing."""


@dataclass(frozen=True)
class GpuWindow:
    """What the trial's GPUs did over one measured window. Every unknown is None.

    Attributes:
        duration_s: From the first sample to the last (the sampler's clock).
        samples: Readings taken, the two at the window's ends included.
        util_pct_mean: GPU utilisation, the mean over samples of the mean over the GPUs.
        util_pct_max: The highest one-GPU utilisation of any sample.
        mem_peak_bytes: The highest memory used on any one GPU at any sample (every process on
            that GPU; SGLang's static pool included).
        energy_j: Joules over the window, summed over the GPUs.
        energy_source: ``counter`` (NVML's total-energy counter differenced) or ``power`` (the
            summed power draw integrated over the samples, trapezoids); None without energy.
        power_w_mean: ``energy_j / duration_s``: the mean of the summed power draw.
    """

    duration_s: float | None = None
    samples: int = 0
    util_pct_mean: float | None = None
    util_pct_max: float | None = None
    mem_peak_bytes: int | None = None
    energy_j: float | None = None
    energy_source: str | None = None
    power_w_mean: float | None = None


class GpuSampler(ABC):
    """Samples the trial's GPUs over measured windows; a context manager that releases them.

    Attributes:
        source: ``nvml``, or None for a sampler that measures nothing.
        note: What a reader of the figures should know: why they are unknown, or that energy
            had to be integrated from power (None when there is nothing to say).
        devices: What the sampler watches (UUIDs or names), in the server's device order.
    """

    source: str | None = None
    note: str | None = None
    devices: tuple[str, ...] = ()

    @abstractmethod
    def start(self) -> None:
        """Open a window: take the first sample and start sampling in the background."""

    @abstractmethod
    def stop(self) -> GpuWindow:
        """Close the window opened by :meth:`start` (a last sample) and return its figures."""

    def close(self) -> None:  # noqa: B027  (optional hook: a sampler with nothing to release keeps it)
        """Stop any background sampling and release the devices (idempotent)."""

    def describe(self) -> dict[str, Any]:
        """What a result records about the sampler itself."""
        return {"source": self.source, "note": self.note, "devices": list(self.devices)}

    def __enter__(self) -> GpuSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NullSampler(GpuSampler):
    """Measures nothing: every window is unknown, and ``note`` says why."""

    def __init__(self, note: str) -> None:
        self.note = note

    def start(self) -> None:
        pass

    def stop(self) -> GpuWindow:
        return GpuWindow()


def visible_devices(value: str | None) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` as CUDA reads them; None when it is unset.

    CUDA stops at the first entry it cannot use (``-1`` is the usual way to hide every GPU), so
    those and the entries after them are dropped here too; an empty list means no GPU.
    """
    if value is None:
        return None
    out: list[str] = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.isdigit() or entry.startswith(("GPU-", "MIG-")):
            out.append(entry)
        else:
            break
    return out


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or not den > 0:
        return None
    return num / den


def _all_known(values: Sequence[_T | None]) -> TypeGuard[Sequence[_T]]:
    return bool(values) and all(v is not None for v in values)


def repeat_figures(window: GpuWindow, tokens: int | None) -> dict[str, Any]:
    """One repeat's telemetry for its ``repeat_breakdown`` row (``tokens``: its output tokens)."""
    return {"gpu_util_pct_mean": window.util_pct_mean,
            "gpu_mem_peak_gib": (None if window.mem_peak_bytes is None
                                 else window.mem_peak_bytes / GIB),
            "gpu_power_w_mean": window.power_w_mean, "gpu_energy_j": window.energy_j,
            "j_per_token": _ratio(window.energy_j, tokens)}


def trial_figures(windows: Sequence[GpuWindow], tokens: Sequence[int | None]) -> dict[str, Any]:
    """The trial's telemetry metrics over all its measured repeats together.

    Energy is a sum, so it is taken over every measured repeat rather than the median-tok/s
    repeat's alone: ``gpu_energy_j`` is the repeats' total, ``gpu_power_w_mean`` that total over
    their summed window time, ``j_per_token`` it over their output tokens and ``tok_s_per_w``
    their output tokens over it (tokens per joule: tok/s per watt over the same windows).
    ``gpu_util_pct_mean`` is the window-time-weighted mean, ``gpu_mem_peak_gib`` the highest.
    A figure is known only when every repeat's is (a partial sum would read low), else None.

    Args:
        windows: One per measured repeat, in order.
        tokens: Each repeat's output (completion) tokens, in the same order.

    Raises:
        ValueError: ``windows`` and ``tokens`` of different lengths.
    """
    if len(windows) != len(tokens):
        raise ValueError(f"{len(windows)} windows for {len(tokens)} repeats")
    out: dict[str, Any] = dict.fromkeys(
        ("gpu_util_pct_mean", "gpu_mem_peak_gib", "gpu_power_w_mean", "gpu_energy_j",
         "tok_s_per_w", "j_per_token"))
    durations = [w.duration_s for w in windows]
    window_s = math.fsum(durations) if _all_known(durations) else None
    energies = [w.energy_j for w in windows]
    if _all_known(energies):
        out["gpu_energy_j"] = math.fsum(energies)
        out["gpu_power_w_mean"] = _ratio(out["gpu_energy_j"], window_s)
    utils = [w.util_pct_mean for w in windows]
    # window_s is set only when every duration is known; the check says so to the type checker.
    if _all_known(utils) and _all_known(durations) and window_s:
        out["gpu_util_pct_mean"] = math.fsum(u * d for u, d in zip(utils, durations, strict=True)) / window_s
    peaks = [w.mem_peak_bytes for w in windows]
    if _all_known(peaks):
        out["gpu_mem_peak_gib"] = max(peaks) / GIB
    total_tokens = sum(tokens) if _all_known(tokens) else None
    out["j_per_token"] = _ratio(out["gpu_energy_j"], total_tokens)
    out["tok_s_per_w"] = _ratio(total_tokens, out["gpu_energy_j"])
    return out


def window_detail(windows: Sequence[GpuWindow]) -> dict[str, Any]:
    """How the windows were measured, for the result's ``gpu_telemetry`` record."""
    sources = sorted({w.energy_source for w in windows if w.energy_source})
    durations = [w.duration_s for w in windows]
    peaks = [w.util_pct_max for w in windows if w.util_pct_max is not None]
    return {"energy_source": "+".join(sources) or None,
            "samples": sum(w.samples for w in windows),
            "window_s": math.fsum(durations) if _all_known(durations) else None,
            "util_pct_max": max(peaks) if peaks else None}


__all__ = ["GIB", "SAMPLE_INTERVAL_S", "GpuSampler", "GpuWindow", "NullSampler",
           "repeat_figures", "trial_figures", "visible_devices", "window_detail"]
