"""One load level measured on a running server: warm-up passes, then rounds.

Apart from :mod:`autotune.trial.measure` (the launch, the levels in turn, the result) so that each
reads as one thing. Every pass of the measured workload, a stabilising one or a round, is measured
the same way (:func:`_one_pass`): the prefix cache flushed where the level flushes, ``/metrics``
scraped before and after, the GPU and the server's load sampled over the requests.

**The stable pass is the first round.** ``measure.warmup_until_stable_pct`` runs passes until two in
a row agree within that many percent. The second of such a pair is as warm as any pass after it (the
rule says so: the server no longer moved between two passes), and it was measured exactly as a
round is, so it is kept as round 1 instead of being thrown away before a fresh round 1. On the H200
every server's first pass already agreed with its second (0.0-0.7% apart,
``docs/measurements/raw/cost-per-answer-h200-2026-12-03/search.tar.xz``): the warm-up SGLang's own
start did (graph capture) left nothing to stabilise, and a pass a server is the saving. The first of
the pair is never a round (it may be up to the tolerance slower), and a warm-up that never became
stable gives no round. The kept pass's seconds move from the warm-up part of the trial's GPU time to
its measurement (``gpu_time.measure_s`` holds every round); ``warmup_tok_s[-1]`` is then the first
round's whole-window figure, which is how a result says it happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from autotune.bench.client import run_benchmark
from autotune.bench.records import BenchResult
from autotune.profile.load import LoadSampler, LoadWindow, load_window, server_cap
from autotune.profile.phases import PhaseProfile
from autotune.profile.snapshot import scrape
from autotune.profile.telemetry import GpuSampler, GpuWindow
from autotune.server.process import ServerProcess
from autotune.space.workload import Workload
from autotune.trial.gpu_time import MEASURE, WARMUP, GpuTime, PartClock
from autotune.trial.measure_settings import MeasureSettings
from autotune.trial.sequential import Consult
from autotune.trial.warmup import Level, flush_cache
from autotune.trial.window import STEADY, objective_rates

__all__ = ["PHASES", "measure_level"]

#: A trial's phases (starting the server, warming up, each round) at INFO. Silent unless a command
#: shows them (``autotune trial`` on stderr); a search's trials run in Ray workers, whose output
#: stays off the console.
PHASES = logging.getLogger("autotune.trial.phases")


@dataclass
class _Pass:
    """One pass of the measured workload, with what was sampled around it."""

    bench: BenchResult
    window: GpuWindow
    load: LoadWindow
    profile: PhaseProfile | None


async def _one_pass(server: ServerProcess, client: httpx.AsyncClient, workload: Workload, *,
                    flush: bool, sampler: GpuSampler, speculative: bool, draft_forwards: bool) -> _Pass:
    base = server.url
    kwargs = workload.bench_kwargs()
    conc = kwargs.get("concurrency")
    server.ensure_alive()
    if flush:
        await flush_cache(client, base)
    before = await scrape(client, base)
    # The GPU window holds the pass's requests only, not the scrapes around them.
    sampler.start()
    load = LoadSampler(client, base)
    load.start()
    bench = await run_benchmark(base, workload.measured(), **kwargs)
    window = sampler.stop()
    loaded = load_window(await load.stop(), [(r.start, r.end) for r in bench.records if r.end is not None],
                         asked=conc, cap=server_cap(before.server_info))
    server.ensure_alive()
    after = await scrape(client, base)
    profile = None
    if bench.duration_s and bench.completed:
        profile = PhaseProfile.from_snapshots(
            before, after, wall_s=bench.duration_s, max_batch=conc or None, speculative=speculative,
            meta_accept_length=bench.accept_length, draft_forwards=draft_forwards, tok_s=bench.output_tok_s)
    return _Pass(bench, window, loaded, profile)


def _keep(level: Level, one: _Pass) -> None:
    level.benches.append(one.bench)
    level.windows.append(one.window)
    level.loads.append(one.load)
    if one.profile is not None:
        level.profiles.append(one.profile)


async def _stabilise(level: Level, *, pct: float, max_rounds: int, clock: PartClock,
                     measure_pass: Callable[[bool], Awaitable[_Pass]]) -> None:
    """Passes until two in a row agree within ``pct`` percent; the second of them is kept as round 1.

    A fixed warm-up count was not enough for a MoE target on an H200: its first measured repeat
    was 10-36% slow (kernels compiled for prompt shapes the warm-up prompts had not had).
    """
    seen = level.warmup
    seen.stable = False
    for _ in range(max_rounds):
        began = time.monotonic()
        one = await measure_pass(True)
        took = time.monotonic() - began
        if one.bench.failed or one.bench.output_tok_s is None:
            seen.stable = None  # the measured rounds will meet and report the failure
            return
        seen.tok_s.append(one.bench.output_tok_s)
        if len(seen.tok_s) >= 2:
            a, b = seen.tok_s[-2:]
            if abs(a - b) <= pct / 100.0 * max(a, b):
                seen.stable = True
                _keep(level, one)
                clock.enter(MEASURE)
                clock.transfer(took, source=WARMUP, target=MEASURE)
                PHASES.info("warm: two passes within %g%%; the second is round 1", pct)
                return


async def measure_level(server: ServerProcess, client: httpx.AsyncClient, workload: Workload,
                        repeats: int, speculative: bool, draft_forwards: bool, *,
                        settings: MeasureSettings | None, sampler: GpuSampler, clock: PartClock,
                        consult: Consult | None = None,
                        spent: Callable[[], GpuTime] | None = None) -> Level:
    """Warm up and measure one load level (one concurrency) on a running server, ``clock``
    splitting its time between warm-up and measurement: ``repeats`` rounds, or with ``consult``
    (called with every round's tok/s after each, and the GPU time ``spent`` so far) until it says stop."""
    kwargs = workload.bench_kwargs()
    conc = kwargs.get("concurrency")
    stable_pct = settings.warmup_until_stable_pct if settings is not None else None
    level = Level(workload=workload)
    asked = settings.flush_cache if settings is not None else None
    flush = asked if asked is not None else stable_pct is not None
    window = settings.window if settings is not None else STEADY

    async def measure_pass(stabilising: bool) -> _Pass:
        # Stabilising passes always start from an empty cache, as they always did.
        return await _one_pass(server, client, workload, flush=flush or stabilising, sampler=sampler,
                               speculative=speculative, draft_forwards=draft_forwards)

    clock.enter(WARMUP)
    PHASES.info("warming up%s", f" (concurrency {conc})" if conc else "")
    warm = workload.warmup()
    if warm:
        await run_benchmark(server.url, warm, **kwargs)
    if stable_pct is not None and settings is not None:  # stable_pct comes from settings
        await _stabilise(level, pct=stable_pct, max_rounds=settings.warmup_max_rounds, clock=clock,
                         measure_pass=measure_pass)
    clock.enter(MEASURE)
    while len(level.benches) < repeats:
        one = await measure_pass(False)
        _keep(level, one)
        bench = one.bench
        chosen = objective_rates(level.benches, level.loads, window=window)
        steady = chosen.steady[-1].tok_s if len(chosen.steady) == len(level.benches) else None
        PHASES.info("round %d%s: %s tok/s over the whole window, %s over its steady interval",
                    len(level.benches), f" of {repeats}" if consult is None else "",
                    "-" if bench.output_tok_s is None else f"{bench.output_tok_s:.1f}",
                    "-" if steady is None else f"{steady:.1f}")
        if consult is not None:
            if bench.failed or bench.output_tok_s is None:
                break  # a round that failed ends the trial as failed; nothing to consult on
            if not consult(chosen.rates, spent() if spent is not None else None):
                break
    return level
