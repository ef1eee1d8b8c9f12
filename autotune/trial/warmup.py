"""The warm-up of a measured load level, and what one level's measurement holds.

Apart from :mod:`autotune.trial.measure` so that module stays the launch and its HTTP loop:
:func:`stabilise` (``measure.warmup_until_stable_pct``), :func:`flush_cache` and :class:`Level`,
one load level's repeats on a running server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import httpx

from autotune.bench.client import run_benchmark
from autotune.bench.records import BenchResult
from autotune.profile.load import LoadWindow
from autotune.profile.phases import PhaseProfile
from autotune.profile.telemetry import GpuWindow
from autotune.server.process import ServerProcess
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


async def stabilise(server: ServerProcess, client: httpx.AsyncClient, workload: Workload,
                    kwargs: Mapping[str, Any], pct: float, max_rounds: int) -> Warmup:
    """Measured-workload passes until two in a row agree within ``pct`` percent.

    A fixed warm-up count was not enough for a MoE target on an H200: its first measured repeat
    was 10-36% slow (kernels compiled for prompt shapes the warm-up prompts had not had).
    """
    seen = Warmup(stable=False)
    for _ in range(max_rounds):
        server.ensure_alive()
        await flush_cache(client, server.url)
        bench = await run_benchmark(server.url, workload.measured(), **kwargs)
        if bench.failed or bench.output_tok_s is None:
            seen.stable = None  # the measured repeats will meet and report the failure
            return seen
        seen.tok_s.append(bench.output_tok_s)
        if len(seen.tok_s) >= 2:
            a, b = seen.tok_s[-2:]
            if abs(a - b) <= pct / 100.0 * max(a, b):
                seen.stable = True
                return seen
    return seen


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
