"""One trial, measured right: launch, warm up, measure R times, profile, stop, and judge.

:func:`measure` runs one server config and returns a
:class:`~autotune.trial.result.TrialResult`; it never raises for a config that fails (OOM, crash,
start-up timeout, every request failing). The failure becomes the result's ``status`` and
``reason`` with the log tail (its kind from :func:`autotune.trial.outcome.failure_of`), so nothing
is lost. :func:`evaluate` adds the no-speculation baseline of the same non-speculative settings
(measured once per group by :func:`baseline_for` and reused through a
:class:`~autotune.trial.baselines.BaselineStore`) and the verdict of
:func:`autotune.trial.verdict.judge`. :class:`MeasureSettings` (and :func:`settings_for`, from a
space) say how a trial measures.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import httpx

from autotune.backend import get_backend
from autotune.errors import (
    AutotuneError,
    LaunchArgsError,
    ServerCrashed,
    ServerError,
    ServerStartupCrash,
    ServerStartupTimeout,
)
from autotune.launch.spec import LaunchSpec
from autotune.profile.nvml import open_sampler
from autotune.profile.telemetry import GpuSampler, NullSampler
from autotune.server.process import ServerProcess
from autotune.server.standby import main_block_outcome, prefork_children
from autotune.sglang import metrics, trial_start
from autotune.sglang.graph_sizes import default_prefill_max_tokens, gpu_memory_mib, model_uses_mla
from autotune.space.workload import Workload
from autotune.trial import standby_slot
from autotune.trial.baselines import BaselineStore, MemoryBaselineStore, group_key, reusable_baseline
from autotune.trial.gpu_time import MEASURE, WARMUP, GpuTime, PartClock, gpus_of
from autotune.trial.level_measure import PHASES, measure_level
from autotune.trial.level_results import LoadLevel, with_levels
from autotune.trial.measure_settings import MeasureSettings
from autotune.trial.outcome import TrialTimeout, failure_of
from autotune.trial.prefill_bound import prefill_token_bound, token_counter
from autotune.trial.result import TrialResult, failed_result, summarise
from autotune.trial.sequential import Consult
from autotune.trial.verdict import judge
from autotune.trial.warmup import Level

if TYPE_CHECKING:
    from autotune.space.trial_config import TrialConfig

DEVICE_TIMER_ENV = {metrics.DEVICE_TIMER_ENV: "1"}

#: What a trial measures with when nothing is said (frozen, so one shared default is safe).
DEFAULT_SETTINGS = MeasureSettings()


def largest_concurrency(workload: Workload) -> int | None:
    """The most requests ``workload`` keeps in flight at any level; None where a level has no cap."""
    caps = [level.concurrency for level in workload.levels()]
    return None if not caps or any(c is None for c in caps) else max(c for c in caps if c is not None)


def own_warmup(workload: Workload, settings: MeasureSettings) -> bool:
    """Whether a trial warms its server up itself before the first measured repeat."""
    return bool(workload.warmup()) or settings.warmup_until_stable_pct is not None


def _prefill_bound(config: TrialConfig, workload: Workload, args: dict[str, Any]) -> int | None:
    """The most tokens one prefill forward of the trial holds, counted with the server's own
    tokenizer where it is a local fast tokenizer (:mod:`autotune.trial.prefill_bound`)."""
    slow = args.get("tokenizer_mode") == "slow"  # SGLang would not load tokenizer.json
    folder = args.get("tokenizer_path") or config.model_path
    return prefill_token_bound(workload, count=None if slow else token_counter(folder))


def launch_spec(config: TrialConfig, settings: MeasureSettings | None = None, *,
                workload: Workload | None = None) -> LaunchSpec:
    """The launch of a trial config: always with metrics and the CUDA-event device timer.

    With ``settings.fast_start`` the server also starts without prefill CUDA graphs, through
    the flag the SGLang in use offers, marked trial-only. With ``settings.lean_start`` and a
    ``workload``, it starts lean (:func:`autotune.sglang.trial_start.lean_start_args`), trial-only too.

    Raises:
        LaunchArgsError: A server-arg name the SGLang in use does not know, or fast start
            impossible with this SGLang or this config.
    """
    args = dict(config.server_args)
    args["enable_metrics"] = True
    env = {k: str(v) for k, v in config.env.items()}
    if settings is None or settings.device_timer:
        env.update(DEVICE_TIMER_ENV)
    backend = get_backend(config.backend)
    if backend.emulated:
        env.update(backend.emulator.launch_env(profile=str(config.profile)))
    args.pop("model_path", None)
    args.pop("speculative_draft_model_path", None)
    trial_only: frozenset[str] = frozenset()
    if settings is not None and settings.fast_start:
        from autotune.sglang import fast_start

        args, trial_only = fast_start.apply(args)
    if settings is not None and settings.lean_start and workload is not None:
        gpu_mem = gpu_memory_mib() if backend.needs_gpus else None  # SGLang's defaults follow the GPU
        args, lean = trial_start.lean_start_args(args, max_concurrency=largest_concurrency(workload),
                                                 own_warmup=own_warmup(workload, settings),
                                                 max_prefill_tokens=_prefill_bound(config, workload, args), env=env,
                                                 gpu_mem_mib=gpu_mem,
                                                 prefill_ceiling=default_prefill_max_tokens(
                                                     gpu_mem, mla=model_uses_mla(config.model_path),
                                                     model_path=config.model_path))
        trial_only |= lean
    return LaunchSpec(model_path=config.model_path, draft_model_path=config.draft_model_path
                      if args.get("speculative_algorithm") else None,
                      server_args=args, env=env, backend=config.backend, trial_only=trial_only)


async def _measure_async(server: ServerProcess, workload: Workload, repeats: int,
                         speculative: bool, draft_forwards: bool = True, *,
                         settings: MeasureSettings | None = None, sampler: GpuSampler | None = None,
                         clock: PartClock | None = None,
                         consult: Consult | None = None, spent: Callable[[], GpuTime] | None = None,
                         consult_at: Callable[[LoadLevel], Consult | None] | None = None,
                         ) -> tuple[list[Level], dict | None]:
    """Every load level of ``workload`` in turn on one server (one level unless it lists several);
    ``consult`` decides the rounds of the primary level, ``consult_at(level)`` those of another
    (None there: a fixed ``repeats``)."""
    sampler = sampler or NullSampler("no sampler")
    clock = clock or PartClock()
    rule = settings.sequential if settings is not None else None
    primary = workload.primary_level()
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
        levels = []
        for w in workload.levels():
            level = workload.level_of(w)
            here = consult if level == primary else (consult_at(level) if consult_at and level else None)
            levels.append(await measure_level(
                server, client, w, rule.max_rounds if here is not None and rule else repeats, speculative,
                draft_forwards, settings=settings, sampler=sampler, clock=clock,
                consult=here if rule is not None else None, spent=spent))
        info = None
        try:
            resp = await client.get(server.url + "/server_info")
            if resp.status_code == 200:
                info = resp.json()
        except (httpx.HTTPError, ValueError):
            info = None
    return levels, info


async def _within(coro: Any, timeout_s: float | None) -> Any:
    """Await ``coro``, cancelling it after ``timeout_s`` (None: no limit) with `TrialTimeout`."""
    if timeout_s is None:
        return await coro
    limit = asyncio.timeout(max(timeout_s, 0.0))
    try:
        async with limit:
            return await coro
    except TimeoutError:
        if limit.expired():  # ours, not a timeout raised inside the measurement
            raise TrialTimeout from None
        raise


def _wait_for_exit(server: ServerProcess, *, timeout_s: float) -> None:
    """Give a server whose requests just failed a moment to finish dying.

    A crashing server drops its connections a little before its process is gone; without this
    wait, a crash mid-measurement would be reported as failed requests instead of as a crash.
    """
    deadline = time.monotonic() + timeout_s
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.05)


def measure(config: TrialConfig, workload: Workload, settings: MeasureSettings = DEFAULT_SETTINGS, *,
            name: str | None = None, consult: Consult | None = None,
            consult_at: Callable[[LoadLevel], Consult | None] | None = None) -> TrialResult:
    """Run one config on a fresh server and summarise R measured runs.

    Args:
        config: A ``TrialConfig`` (server_args, env, backend, profile, model and draft paths).
        workload: The prompts and load shape.
        settings: Repeats, timeouts, where logs go.
        name: Used in log file names.
        consult: With ``settings.sequential``: called after each round of the primary level with
            every round's tok/s so far and the server's GPU time so far; True measures another
            round (up to the rule's cap).
        consult_at: The same for each other load level, by level (None there: fixed ``repeats``).

    Returns:
        The result, with ``status`` ``ok`` or ``failed`` (never an exception for a config fault).
    """
    t0 = time.monotonic()
    try:
        spec = launch_spec(config, settings, workload=workload)
    except (LaunchArgsError, ValueError) as exc:
        kind, why = failure_of(exc, launched=False)
        return failed_result(config, None, why, failure=kind, t0=t0)
    if settings.validate:
        try:
            spec.validate()
        except LaunchArgsError as exc:
            kind, why = failure_of(exc, launched=False)
            return failed_result(config, spec, why, failure=kind, t0=t0)
    # A null choice in the space means "make sure it is unset", even if the driver's env has it.
    unset = set(getattr(config, "unset_env", ()) or ())
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(spec.env)
    if settings.lean_start:  # the process's, not the spec's: never shown in or exported with the command
        env.update(trial_start.QUICK_STOP_ENV)
    backend = get_backend(config.backend)
    if backend.emulated and settings.sim_seed is not None:
        env.update(backend.emulator.launch_env(seed=settings.sim_seed))
    workdir = Path(settings.workdir or tempfile.mkdtemp(prefix="autotune-trial-"))
    workdir.mkdir(parents=True, exist_ok=True)
    label = name or ("baseline" if config.is_baseline else "trial")
    log_path = workdir / f"{label}-{os.getpid()}-{int(time.time() * 1000)}.log"
    server = ServerProcess(lambda port: spec.argv(python=settings.python, port=port), env=env,
                           startup_timeout_s=min(settings.startup_timeout_s,
                                                 settings.trial_timeout_s or float("inf")),
                           grace_s=settings.grace_s, log_path=log_path, inherit_env=False,
                           standby=standby_slot.take() if settings.standby else None)
    if settings.standby:  # the next server's imports, while this one starts up
        standby_slot.prepare(argv=spec.argv(python=settings.python), backend=config.backend, env=env,
                             workdir=workdir, grace_s=settings.grace_s, prefork=settings.prefork)
    speculative = bool(spec.server_args.get("speculative_algorithm"))
    steps = spec.server_args.get("speculative_num_steps")
    # EAGLE with one step takes its only draft token from the re-extend: no draft forward at all.
    draft_forwards = not (speculative and steps is not None and int(steps) <= 1)
    sampler = open_sampler(env=env, wanted=settings.gpu_telemetry,
                           needs_gpus=get_backend(config.backend).needs_gpus,
                           server_gpus=getattr(config, "tp_size", None))
    clock = PartClock()  # warm-up and measurement; the server times its own start-up and teardown

    def spent() -> GpuTime:
        # What the server has held so far, for a round's report: a scheduler may end the trial
        # there, and its GPU time must still be counted.
        return GpuTime(gpus=gpus_of(getattr(config, "tp_size", None)), startup_s=server.lifetime.startup_s,
                       warmup_s=clock.so_far(WARMUP), measure_s=clock.so_far(MEASURE))

    PHASES.info("starting the %s server", label)
    try:
        with sampler, server:
            started = time.monotonic() - t0
            PHASES.info("server up after %.1f s", started)
            # The wait for the next server's standby holds this server's GPUs: counted as warm-up.
            clock.enter(WARMUP)
            ended, waited = standby_slot.check_ready() if settings.standby else (None, 0.0)
            cpu0 = standby_slot.cpu_s()
            left = (None if settings.trial_timeout_s is None
                    else settings.trial_timeout_s - (time.monotonic() - t0))
            levels, info = asyncio.run(_within(
                _measure_async(server, workload, settings.repeats, speculative, draft_forwards,
                               settings=settings, sampler=sampler, clock=clock, consult=consult,
                               spent=spent, consult_at=consult_at), left))
            if any(b.failed for level in levels for b in level.benches):
                _wait_for_exit(server, timeout_s=3.0)
            server.ensure_alive()
            tail = server.log_tail()
            cpu1 = standby_slot.cpu_s()
    except (TrialTimeout, ServerError, AutotuneError, httpx.HTTPError, OSError) as exc:
        kind, why = failure_of(exc, trial_timeout_s=settings.trial_timeout_s)
        if isinstance(exc, (ServerStartupCrash, ServerStartupTimeout, ServerCrashed)):
            died_tail: str | None = exc.log_tail  # the tail the server left as it died
        else:
            died_tail = server.log_tail() if server.log_path else None
        return failed_result(config, spec, why, failure=kind, log_tail=died_tail,
                             log_path=str(log_path), t0=t0, gpu_time=_held(server, clock, config))
    per_level = []
    for level in levels:
        one = summarise(config, spec, level.benches, level.profiles, info, tail=tail,
                        log_path=str(log_path), t0=t0, startup_s=started, windows=level.windows,
                        sampler=sampler, loads=level.loads, window=settings.window)
        one.warmup_tok_s, one.warmup_stable = level.warmup.tok_s, level.warmup.stable
        # The GPUs the server was given (Ray sets CUDA_VISIBLE_DEVICES for a Tune trial), whatever
        # the sampler saw: two trials at once must show two different GPUs, emulator included.
        one.gpu_telemetry = {**(one.gpu_telemetry or {}),
                             "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES")}
        per_level.append((workload.level_of(level.workload), one))
    result = with_levels(per_level, workload)
    result.gpu_time = _held(server, clock, config)
    if settings.standby:
        result.standby = {**{k: v for k, v in (server.standby_note or {}).items() if k != "line"},
                          "next_ended": ended, "next_waited_s": waited,
                          "next_cpu_s_measuring": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 3),
                          "children": prefork_children(log_path), "main_block_checked": main_block_outcome(log_path)}
    return result


def _held(server: ServerProcess, clock: PartClock, config: TrialConfig) -> GpuTime:
    """Where a stopped server's GPU time went: warm-up and measurement end where its stop began."""
    life = server.lifetime
    clock.close(at=life.stop_began)
    return GpuTime(gpus=gpus_of(getattr(config, "tp_size", None)), startup_s=life.startup_s,
                   warmup_s=clock.seconds(WARMUP), measure_s=clock.seconds(MEASURE),
                   teardown_s=life.teardown_s)


def baseline_for(baseline_config: TrialConfig, workload: Workload, settings: MeasureSettings,
                 store: BaselineStore, *, slos: Sequence[tuple[str, str, float]] = (),
                 name: str = "baseline",
                 run: Callable[[TrialConfig], TrialResult] | None = None) -> tuple[TrialResult, bool]:
    """The group's baseline and whether it was measured by this call.

    Taken from the store when there; else measured once, while trials of the same group wait on
    the group's lock instead of each measuring it.

    Args:
        run: Measures the baseline (the search's evaluator: in rounds, as a baseline trial is);
            None: :func:`measure` with ``settings`` (a fixed ``repeats``).
    """
    key = group_key(baseline_config)
    found = reusable_baseline(store, key)
    if found is not None:
        return found, False
    with store.lock(key):
        found = reusable_baseline(store, key)
        if found is not None:
            return found, False
        measured = (run(baseline_config) if run is not None
                    else measure(baseline_config, workload, settings, name=name))
        result = judge(measured, None, slos=slos)
        store.put(key, result)
        return result, True


def evaluate(config: TrialConfig, *, workload: Workload, baseline_config: TrialConfig | None = None,
             settings: MeasureSettings = DEFAULT_SETTINGS, store: BaselineStore | None = None,
             slos: Sequence[tuple[str, str, float]] = (), min_speedup: float = 1.0) -> TrialResult:
    """Measure a config and judge it against its baseline (measured or reused).

    Args:
        config: The ``TrialConfig`` to run.
        workload: Prompts and load shape.
        baseline_config: The same non-speculative settings with speculation off; required for a
            speculative config.
        settings: Measurement settings.
        store: Baseline reuse; a fresh in-memory store if None.
        slos: ``(metric, op, limit)`` constraints.
        min_speedup: Speedup a speculative config must exceed.
    """
    store = store or MemoryBaselineStore()
    if config.is_baseline:
        key = group_key(config)
        cached = store.get(key)
        if cached is not None:
            return judge(cached, None, slos=slos)
        result = judge(measure(config, workload, settings, name="baseline"), None, slos=slos)
        store.put(key, result)
        return result
    if baseline_config is None:
        raise ValueError("a speculative config needs its baseline_config")
    baseline, _ = baseline_for(baseline_config, workload, settings, store, slos=slos)
    result = measure(config, workload, settings)
    return judge(result, baseline, slos=slos, min_speedup=min_speedup)
