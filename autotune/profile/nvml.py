"""The NVML sampler (``nvidia-ml-py``, module ``pynvml``): a background thread over the window.

:func:`open_sampler` decides whether a trial samples at all (it lives here, beside the sampler it
opens, so that the sampler interface in :mod:`autotune.profile.telemetry` needs nothing of NVML);
:func:`open_nvml` starts NVML and finds the handles of the GPUs the server sees;
:class:`NvmlSampler` reads them every ``interval_s`` in a daemon thread, so the asyncio loop that
drives the workload is never blocked by it (each NVML call takes tens of microseconds, and ctypes
releases the GIL while it runs). ``pynvml`` is imported only here, and only when a trial samples.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping

from autotune.profile.telemetry import SAMPLE_INTERVAL_S, GpuSampler, GpuWindow, NullSampler, visible_devices

INSTALL_HINT = "pip install 'autotune[gpu]' (nvidia-ml-py)"


@dataclass(frozen=True)
class _Sample:
    """One reading of every GPU; a figure is None unless every GPU gave it."""

    t: float
    util_mean: float | None
    util_max: float | None
    mem_max: int | None
    power_w: float | None  # summed over the GPUs


class NvmlSampler(GpuSampler):
    """Samples NVML handles over a window; energy from NVML's counter when every GPU has it.

    Args:
        nvml: The ``pynvml`` module (started: ``nvmlInit`` done).
        handles: One NVML handle per GPU the server sees.
        devices: What to call them in the result (UUIDs), in the same order.
        interval_s: Seconds between background samples.
        clock: Timestamps of samples (monotonic seconds); tests pass a fake one.
        background: Sample in a thread between :meth:`start` and :meth:`stop`; False leaves the
            samples between the two ends to whoever calls :meth:`sample` (tests).
        shutdown: Call ``nvmlShutdown`` on :meth:`close` (NVML counts inits and shutdowns).
    """

    source = "nvml"

    def __init__(self, nvml: Any, handles: Sequence[Any], *, devices: Sequence[str],
                 interval_s: float, clock: Callable[[], float] = time.monotonic,
                 background: bool = True, shutdown: bool = True) -> None:
        if not handles:
            raise ValueError("an NVML sampler needs at least one GPU handle")
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._nvml, self._handles = nvml, list(handles)
        self.devices = tuple(devices)
        self._interval_s, self._clock = interval_s, clock
        self._background, self._shutdown = background, shutdown
        self._not_supported: tuple[type[BaseException], ...] = tuple(
            c for c in (getattr(nvml, "NVMLError_NotSupported", None),) if isinstance(c, type))
        self._error: type[BaseException] = getattr(nvml, "NVMLError", OSError)
        self._counter = True  # until a GPU answers that it has no energy counter
        self._samples: list[_Sample] = []
        self._energy0: list[int] | None = None
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._open = False
        self._closed = False
        self.read_errors = 0

    # ----- readings ---------------------------------------------------------------------------
    def _read(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self._error:  # one lost reading is unknown; the window survives it
            self.read_errors += 1
            return None

    def sample(self) -> None:
        """Read utilisation, memory used and power draw of every GPU once."""
        nv, t = self._nvml, self._clock()

        def util(h: Any) -> float:
            return float(nv.nvmlDeviceGetUtilizationRates(h).gpu)

        def mem(h: Any) -> int:
            return int(nv.nvmlDeviceGetMemoryInfo(h).used)

        def power(h: Any) -> float:
            return nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW

        utils = [self._read(partial(util, h)) for h in self._handles]
        mems = [self._read(partial(mem, h)) for h in self._handles]
        powers = [self._read(partial(power, h)) for h in self._handles]
        self._samples.append(_Sample(
            t=t, util_mean=math.fsum(utils) / len(utils) if _whole(utils) else None,
            util_max=max(utils) if _whole(utils) else None,
            mem_max=max(mems) if _whole(mems) else None,
            power_w=math.fsum(powers) if _whole(powers) else None))

    def _energy_mj(self) -> list[int] | None:
        """Every GPU's total-energy counter (mJ since the driver loaded), or None."""
        if not self._counter:
            return None
        try:
            return [int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles]
        except self._not_supported:
            # Pre-Volta GPUs have no counter: integrate power for this window and every next one.
            self._counter = False
            said = "no NVML energy counter on these GPUs: energy is power integrated"
            self.note = f"{self.note}; {said}" if self.note else said
            return None
        except self._error:
            self.read_errors += 1
            return None

    # ----- the window -------------------------------------------------------------------------
    def start(self) -> None:
        if self._closed:
            raise ValueError("the sampler is closed")
        if self._open:
            raise ValueError("a window is already open: stop() it first")
        self._open = True
        self._samples = []
        self._energy0 = self._energy_mj()
        self.sample()
        if self._background:
            self._halt.clear()
            self._thread = threading.Thread(target=self._loop, name="autotune-nvml", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._halt.wait(self._interval_s):
            self.sample()

    def _join(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def stop(self) -> GpuWindow:
        if not self._open:
            raise ValueError("no window is open: start() it first")
        self._join()  # the thread is gone before the last sample: no list is shared after this
        self.sample()
        energy1 = self._energy_mj()
        self._open = False
        return self._window(self._samples, self._energy0, energy1)

    def _window(self, samples: Sequence[_Sample], e0: list[int] | None,
                e1: list[int] | None) -> GpuWindow:
        duration = samples[-1].t - samples[0].t
        utils = [s.util_mean for s in samples if s.util_mean is not None]
        util_max = [s.util_max for s in samples if s.util_max is not None]
        mems = [s.mem_max for s in samples if s.mem_max is not None]
        energy, source = None, None
        if e0 is not None and e1 is not None and all(b >= a for a, b in zip(e0, e1, strict=True)):
            energy, source = sum(b - a for a, b in zip(e0, e1, strict=True)) / 1000.0, "counter"
        elif samples[0].power_w is not None and samples[-1].power_w is not None:
            # Trapezoids over the samples that have power (a missing one is bridged): the
            # counter is missing, or went backwards (the driver reloaded mid-window).
            known = [(s.t, s.power_w) for s in samples if s.power_w is not None]
            energy = math.fsum((tb - ta) * (pa + pb) / 2.0
                               for (ta, pa), (tb, pb) in zip(known, known[1:], strict=False))
            source = "power"
        return GpuWindow(
            duration_s=duration, samples=len(samples),
            util_pct_mean=math.fsum(utils) / len(utils) if utils else None,
            util_pct_max=max(util_max) if util_max else None,
            mem_peak_bytes=max(mems) if mems else None,
            energy_j=energy, energy_source=source,
            power_w_mean=energy / duration if energy is not None and duration > 0 else None)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._join()
        self._open = False
        if self._shutdown:
            try:
                self._nvml.nvmlShutdown()
            except self._error:
                pass  # nothing left to release


def _whole(values: Sequence[Any]) -> bool:
    """Every GPU answered: a sum or mean over some of the GPUs would read low."""
    return None not in values


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _handles(nvml: Any, devices: list[str] | None) -> tuple[list[Any], list[str]]:
    """NVML handles and UUIDs of the server's GPUs (``devices``: CUDA_VISIBLE_DEVICES entries).

    An index is NVML's (PCI bus order), which is CUDA's when every GPU of the host is the same
    model or ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; a ``GPU-`` UUID may be a unique prefix, as CUDA
    allows.

    Raises:
        ValueError: A MIG instance, or a UUID prefix that names no GPU or several.
    """
    count = int(nvml.nvmlDeviceGetCount())
    if devices is None:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    else:
        handles = []
        for entry in devices:
            if entry.startswith("MIG-"):
                raise ValueError(f"{entry} is a MIG instance: NVML's power and energy are per "
                                 "physical GPU")
            if entry.isdigit():
                handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
                continue
            uuids = {_text(nvml.nvmlDeviceGetUUID(h)): h
                     for h in (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count))}
            found = [h for u, h in uuids.items() if u.startswith(entry)]
            if len(found) != 1:
                raise ValueError(f"CUDA_VISIBLE_DEVICES entry {entry} matches {len(found)} GPUs")
            handles.append(found[0])
    if not handles:
        raise ValueError("NVML reports no GPU")
    return handles, [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]


def open_nvml(devices: list[str] | None, *, interval_s: float) -> GpuSampler:
    """An NVML sampler on ``devices`` (None: every GPU), else a :class:`NullSampler` saying why."""
    try:
        import pynvml
    except ImportError:
        return NullSampler(f"pynvml is not importable: {INSTALL_HINT}")
    error = getattr(pynvml, "NVMLError", OSError)
    try:
        pynvml.nvmlInit()
    except (error, OSError) as exc:
        return NullSampler(f"NVML did not start: {exc}")
    try:
        handles, names = _handles(pynvml, devices)
    except (error, ValueError) as exc:
        try:
            pynvml.nvmlShutdown()
        except error:
            pass  # the init is what failed to be of use; nothing more to release
        return NullSampler(f"the server's GPUs are not NVML devices: {exc}")
    return NvmlSampler(pynvml, handles, devices=names, interval_s=interval_s)


def open_sampler(*, env: Mapping[str, str], wanted: bool | None, needs_gpus: bool,
                 server_gpus: int | None = None,
                 interval_s: float = SAMPLE_INTERVAL_S) -> GpuSampler:
    """The sampler for a trial whose server runs with ``env``.

    Args:
        env: The server's environment; its ``CUDA_VISIBLE_DEVICES`` (set by Ray for a Tune
            trial) picks the GPUs, every GPU NVML reports when unset.
        wanted: True to sample, False not to, None to sample when the backend takes GPUs.
        needs_gpus: Whether the trial's backend runs on physical GPUs (the emulator does not,
            so by default its trials report no telemetry rather than an unrelated GPU's).
        server_gpus: GPUs the server uses (its ``tp_size``), to say so in the ``note`` when
            ``CUDA_VISIBLE_DEVICES`` is unset and NVML reports more: they are all counted.
        interval_s: Seconds between background samples.

    Returns:
        An NVML sampler, or a :class:`NullSampler` with the reason in its ``note`` (pynvml not
        importable, NVML's init failing, no visible GPU, a device NVML does not know).
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s}")
    if wanted is False:
        return NullSampler("GPU telemetry switched off")
    if wanted is None and not needs_gpus:
        return NullSampler("the backend runs on no GPU")
    devices = visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    if devices == []:
        return NullSampler("CUDA_VISIBLE_DEVICES leaves the server no GPU")
    sampler = open_nvml(devices, interval_s=interval_s)
    if devices is None and server_gpus is not None and len(sampler.devices) > server_gpus:
        sampler.note = (f"CUDA_VISIBLE_DEVICES unset: all {len(sampler.devices)} GPUs are counted, "
                        f"the server's {server_gpus} and the others")
    return sampler


__all__ = ["INSTALL_HINT", "NvmlSampler", "open_nvml", "open_sampler"]
