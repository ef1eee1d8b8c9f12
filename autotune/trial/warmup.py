"""The warm-up of a measured load level, and what one level's measurement holds.

Apart from :mod:`autotune.trial.measure` so that module stays the launch and its HTTP loop:
what the stabilising passes saw (:class:`Warmup`; the passes themselves are
:mod:`autotune.trial.level_measure`'s), :func:`flush_cache` and :class:`Level`, one load level's
repeats on a running server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from autotune.bench.records import BenchResult
from autotune.profile.load import LoadWindow
from autotune.profile.phases import PhaseProfile
from autotune.profile.telemetry import GpuWindow
from autotune.space.workload import Workload


@dataclass
class Warmup:
    """What the stabilising warm-up passes saw."""

    tok_s: list[float] = field(default_factory=list)
    stable: bool | None = None


async def flush_cache(client: httpx.AsyncClient, base: str) -> bool:
    """Empty SGLang's prefix cache (it refuses while requests run); whether it did."""
    try:
        resp = await client.post(base + "/flush_cache")
    except httpx.HTTPError:
        return False
    return resp.status_code == 200


@dataclass
class Level:
    """One load level measured on a running server: its workload (one concurrency), each
    repeat's benchmark, phase profile, GPU window and server load, and its warm-up."""

    workload: Workload
    benches: list[BenchResult] = field(default_factory=list)
    profiles: list[PhaseProfile] = field(default_factory=list)
    windows: list[GpuWindow] = field(default_factory=list)
    loads: list[LoadWindow] = field(default_factory=list)
    warmup: Warmup = field(default_factory=lambda: Warmup())
