"""A stand-in for ``pynvml`` (nvidia-ml-py): scripted GPUs whose readings follow a fake clock.

Each :class:`FakeGpu` answers NVML's calls from functions of ``clock.now`` (or of its own read
count), so a test knows every figure a sampler should get. Install it with
``monkeypatch.setitem(sys.modules, "pynvml", make_module(gpus, clock))``.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

GIB = 2 ** 30


class NVMLError(Exception):
    """pynvml's base error."""


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's own spelling
    """What pynvml raises for a query the GPU does not support."""


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


Script = Callable[[float], float]


@dataclass
class FakeGpu:
    """One scripted GPU. ``energy_j`` None: no energy counter (NotSupported)."""

    uuid: str
    util: Script = lambda t: 0.0
    mem_gib: Script = lambda t: 1.0
    power_w: Script = lambda t: 100.0
    energy_j: Script | None = None
    fail_power_at: set[float] = field(default_factory=set)  # clock times a power read fails
    reads: dict[str, int] = field(default_factory=dict)
    on_read: Callable[[FakeGpu], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, what: str) -> None:
        with self._lock:
            self.reads[what] = self.reads.get(what, 0) + 1
        if self.on_read is not None:
            self.on_read(self)


def make_module(gpus: Sequence[FakeGpu], clock: FakeClock, *,
                init_error: Exception | None = None) -> types.ModuleType:
    """A ``pynvml`` module over ``gpus``; ``init_error`` is what ``nvmlInit`` raises."""
    mod = types.ModuleType("pynvml")
    state = {"inits": 0, "shutdowns": 0}
    mod.state = state  # type: ignore[attr-defined]
    mod.NVMLError = NVMLError  # type: ignore[attr-defined]
    mod.NVMLError_NotSupported = NVMLError_NotSupported  # type: ignore[attr-defined]

    def nvmlInit() -> None:  # noqa: N802 - pynvml's names
        if init_error is not None:
            raise init_error
        state["inits"] += 1

    def nvmlShutdown() -> None:  # noqa: N802
        state["shutdowns"] += 1

    def nvmlDeviceGetCount() -> int:  # noqa: N802
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(i: int) -> FakeGpu:  # noqa: N802
        if not 0 <= i < len(gpus):
            raise NVMLError("Invalid Argument")
        return gpus[i]

    def nvmlDeviceGetUUID(h: FakeGpu) -> str:  # noqa: N802
        return h.uuid

    def nvmlDeviceGetUtilizationRates(h: FakeGpu) -> Any:  # noqa: N802
        h.count("util")
        return types.SimpleNamespace(gpu=int(h.util(clock.now)), memory=0)

    def nvmlDeviceGetMemoryInfo(h: FakeGpu) -> Any:  # noqa: N802
        h.count("mem")
        return types.SimpleNamespace(used=int(h.mem_gib(clock.now) * GIB), total=141 * GIB)

    def nvmlDeviceGetPowerUsage(h: FakeGpu) -> int:  # noqa: N802
        h.count("power")
        if clock.now in h.fail_power_at:
            raise NVMLError("Unknown Error")
        return int(round(h.power_w(clock.now) * 1000))  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(h: FakeGpu) -> int:  # noqa: N802
        h.count("energy")
        if h.energy_j is None:
            raise NVMLError_NotSupported("Not Supported")
        return int(round(h.energy_j(clock.now) * 1000))  # millijoules

    for fn in (nvmlInit, nvmlShutdown, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex,
               nvmlDeviceGetUUID, nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo,
               nvmlDeviceGetPowerUsage, nvmlDeviceGetTotalEnergyConsumption):
        setattr(mod, fn.__name__, fn)
    return mod
