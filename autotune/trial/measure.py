"""One trial, measured right: launch, warm up, measure R times, profile, stop, and judge.

:func:`measure` runs one server config and returns a :class:`TrialResult`; it never raises for a
config that fails (OOM, crash, start-up timeout, every request failing). The failure becomes the
result's ``status`` and ``reason`` with the log tail, so nothing is lost. :func:`evaluate` adds the
no-speculation baseline of the same non-speculative settings (measured once per group and reused
through a :class:`BaselineStore`), the break-even arithmetic, SLO checks and the verdict.
"""

from __future__ import annotations

import asyncio
import enum
import fcntl
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, Sequence

import httpx

from autotune import cli
from autotune.space import synthetic
from autotune.trial.winner import metric_field
from autotune.bench.client import BenchResult, run_benchmark
from autotune.errors import (AutotuneError, LaunchArgsError, ServerCrashed, ServerError,
                             ServerStartupCrash, ServerStartupTimeout)
from autotune.launch.spec import LaunchSpec
from autotune.sglang.backend import get_backend
from autotune.profile.phases import PhaseProfile, break_even, scrape, speedup
from autotune.server.process import ServerProcess
from autotune.space.workload import Workload

# Statuses. "infeasible" is a config that ran but lost to its baseline or broke an SLO.
OK, FEASIBLE, INFEASIBLE, FAILED = "ok", "feasible", "infeasible", "failed"

DEVICE_TIMER_ENV = {"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}


class Failure(str, enum.Enum):
    """Why a trial failed: the one map from what happened to a typed kind.

    Decided where the failure is caught, from the exception's type and the server's exit code;
    only out-of-memory is read from the server's log, which is SGLang's only signal of it.
    """

    OOM = "oom"
    CRASH_AT_START = "crash_at_start"
    STARTUP_TIMEOUT = "startup_timeout"
    CRASH_DURING = "crash_during_measurement"
    HANG = "hang"
    BAD_CONFIG = "bad_config"
    REQUESTS_FAILED = "requests_failed"
    ERROR = "error"

    @property
    def deterministic(self) -> bool:
        """A second start of the same config would fail the same way."""
        return self in (Failure.OOM, Failure.CRASH_AT_START, Failure.BAD_CONFIG)


@dataclass(frozen=True)
class MeasureSettings:
    """How a trial measures.

    Attributes:
        repeats: Measured runs of the workload on one server; the median is reported.
        startup_timeout_s: Longest wait for the server to become healthy.
        trial_timeout_s: Longest one server run may take, start-up and measurement together
            (a request that stalls mid-stream ends the run here); None for no limit.
        grace_s: SIGTERM-to-SIGKILL grace when stopping the server group.
        workdir: Where server logs and records go (a temp dir if None).
        python: Interpreter that runs the server module.
        validate: Check every launch command with SGLang's parser first.
        sim_seed: Seed for the emulator's noise (sim backend only; None = random).
        fast_start: Start every trial server (baselines too) without prefill CUDA graphs
            (``measure.fast_start``; see :mod:`autotune.sglang.fast_start`). The switch is trial-only:
            logged with the trial, never exported.
        warmup_until_stable_pct: After the warm-up prompts, run the measured workload again and
            again (the prefix cache flushed before each pass) until two passes in a row agree
            within this many percent of tok/s, at most ``warmup_max_rounds`` passes; every
            measured repeat then also starts from a flushed cache, so no repeat gets another's
            cached prefill or compiled shapes. None: one pass of the warm-up prompts only.
        warmup_max_rounds: Most stabilising passes (>= 2).
        device_timer: Run with SGLang's CUDA-event device timer (``measure.phase_profile``);
            off, the profile has wall-clock figures only.
    """

    repeats: int = 3
    startup_timeout_s: float = 900.0
    trial_timeout_s: float | None = None
    grace_s: float = 10.0
    workdir: str | None = None
    python: str = sys.executable
    validate: bool = True
    sim_seed: int | None = None
    fast_start: bool = False
    warmup_until_stable_pct: float | None = None
    warmup_max_rounds: int = 6
    device_timer: bool = True

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.warmup_until_stable_pct is not None and not self.warmup_until_stable_pct > 0:
            raise ValueError("warmup_until_stable_pct must be > 0 or None, got "
                             f"{self.warmup_until_stable_pct}")
        if self.warmup_max_rounds < 2:
            raise ValueError(f"warmup_max_rounds must be >= 2, got {self.warmup_max_rounds}")
        if self.trial_timeout_s is not None and not self.trial_timeout_s > 0:
            raise ValueError(f"trial_timeout_s must be > 0 or None, got {self.trial_timeout_s}")


@dataclass
class TrialResult:
    """Everything one trial measured. Every unknown is None; a failure keeps its log tail and
    its :class:`Failure` kind (``failure``, the enum's value)."""

    status: str
    reason: str | None
    params: dict[str, Any]
    is_baseline: bool
    failure: str | None = None
    launch_command: str | None = None
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    output_tok_s: float | None = None
    output_tok_s_spread: float | None = None
    output_tok_s_repeats: list[float] = field(default_factory=list)
    # Robust spread: 1.4826 * MAD over the median, in percent; the range: (max - min) / median.
    output_tok_s_spread_pct: float | None = None
    output_tok_s_range_pct: float | None = None
    warmup_tok_s: list[float] = field(default_factory=list)
    warmup_stable: bool | None = None
    decode_tok_s_p50: float | None = None
    decode_tok_s_p90: float | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p90: float | None = None
    itl_ms_p99: float | None = None
    e2e_ms_p50: float | None = None
    e2e_ms_p90: float | None = None
    e2e_ms_p99: float | None = None
    completed: int | None = None
    failed_requests: int | None = None
    accept_length: float | None = None
    accept_length_meta_info: float | None = None
    accept_length_server_info: float | None = None
    # "synthetic" when SGLANG_SIMULATE_ACC_LEN forced the accept length (autotune.space.synthetic),
    # "measured" for other speculative runs, None without speculation.
    acceptance: str | None = None
    synthetic_accept_length: float | None = None
    phases: dict[str, Any] | None = None
    baseline_tok_s: float | None = None
    baseline_status: str | None = None
    baseline_decode_step_ms: float | None = None
    speedup: float | None = None
    break_even_accept_length: float | None = None
    feasible: bool | None = None
    slo_violations: list[str] = field(default_factory=list)
    log_tail: str | None = None
    log_path: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    server_info: dict[str, Any] | None = field(default=None, repr=False)
    duration_s: float | None = None
    startup_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status in (OK, FEASIBLE, INFEASIBLE)

    def metric(self, name: str) -> float | None:
        """A metric by the name SLOs and objectives use (``p99_ttft_ms`` or ``ttft_ms_p99``)."""
        value = getattr(self, metric_field(name), None)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def to_dict(self, *, records: bool = False) -> dict[str, Any]:
        """JSON-ready form. Records are left out unless asked for."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("records", "server_info")}
        if records:
            out["records"] = self.records
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TrialResult":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


class BaselineStore(Protocol):
    """Where baselines of non-speculative groups are kept for reuse."""

    def get(self, key: str) -> TrialResult | None: ...

    def put(self, key: str, result: TrialResult) -> None: ...

    def lock(self, key: str): ...


class MemoryBaselineStore:
    """Baselines in process memory (one CLI run)."""

    def __init__(self) -> None:
        self._data: dict[str, TrialResult] = {}

    def get(self, key: str) -> TrialResult | None:
        return self._data.get(key)

    def put(self, key: str, result: TrialResult) -> None:
        self._data[key] = result

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        yield


class FileBaselineStore:
    """Baselines as JSON files in a directory shared by the trials of one search.

    A per-group ``flock`` makes concurrent trials of the same group wait for one measurement
    instead of each measuring the baseline.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str, suffix: str) -> Path:
        return self.dir / (hashlib.sha1(key.encode()).hexdigest()[:16] + suffix)

    def get(self, key: str) -> TrialResult | None:
        path = self._path(key, ".json")
        try:
            return TrialResult.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    def put(self, key: str, result: TrialResult) -> None:
        path = self._path(key, ".json")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result.to_dict()))
        os.replace(tmp, path)

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        with open(self._path(key, ".lock"), "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def group_key(config: Any) -> str:
    """Stable text key of a config's non-speculative settings."""
    key = config.group_key()
    return json.dumps(key, sort_keys=True, default=str) if not isinstance(key, str) else key


def launch_spec(config: Any, settings: MeasureSettings | None = None) -> LaunchSpec:
    """The launch of a trial config: always with metrics and the CUDA-event device timer.

    With ``settings.fast_start`` the server also starts without prefill CUDA graphs, through
    the flag the SGLang in use offers, marked trial-only.

    Raises:
        LaunchArgsError: A server-arg name the SGLang in use does not know, or fast start
            impossible with this SGLang or this config.
    """
    args = dict(config.server_args)
    args["enable_metrics"] = True
    env = {k: str(v) for k, v in config.env.items()}
    if settings is None or settings.device_timer:
        env.update(DEVICE_TIMER_ENV)
    if get_backend(config.backend).emulated:
        env["AUTOTUNE_SIM_PROFILE"] = str(config.profile)
    args.pop("model_path", None)
    args.pop("speculative_draft_model_path", None)
    trial_only: frozenset[str] = frozenset()
    if settings is not None and settings.fast_start:
        from autotune.sglang import fast_start

        args, trial_only = fast_start.apply(args)
    return LaunchSpec(model_path=config.model_path, draft_model_path=config.draft_model_path
                      if args.get("speculative_algorithm") else None,
                      server_args=args, env=env, backend=config.backend, trial_only=trial_only)


def _acceptance(config: Any) -> dict[str, Any]:
    env = getattr(config, "env", None) or {}
    speculative = not config.is_baseline
    return {"acceptance": synthetic.acceptance_source(env, speculative=speculative),
            "synthetic_accept_length": synthetic.forced_accept_length(env) if speculative else None}


def _failed(config: Any, spec: LaunchSpec | None, reason: str, *, failure: Failure,
            log_tail: str | None = None, log_path: str | None = None,
            t0: float | None = None) -> TrialResult:
    return TrialResult(
        status=FAILED, reason=reason, params=dict(config.params), is_baseline=config.is_baseline,
        failure=failure.value,
        launch_command=spec.shell_command() if spec else None,
        argv=spec.argv(python="python") if spec else None, env=spec.record_env() if spec else None,
        log_tail=log_tail, log_path=log_path, feasible=False,
        duration_s=(time.monotonic() - t0) if t0 else None, **_acceptance(config))


def _startup_failure(exc: ServerError) -> tuple[Failure, str]:
    tail = exc.log_tail or ""
    if isinstance(exc, ServerStartupTimeout):
        return Failure.STARTUP_TIMEOUT, "start-up timeout: the server never became healthy"
    if "OutOfMemoryError" in tail or "out of memory" in tail.lower():
        return Failure.OOM, "out of memory at start-up (CUDA out of memory)"
    if "Not enough memory" in tail:
        return Failure.OOM, "not enough memory for the KV cache at start-up"
    code = exc.returncode
    return Failure.CRASH_AT_START, (f"crashed at start-up (exit code {code})" if code is not None
                                    else "crashed at start-up")


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def spread_pct(values: Sequence[float]) -> tuple[float | None, float | None]:
    """(robust spread, range) of repeats in percent of their median; None below two values.

    The robust spread is 1.4826 times the median absolute deviation (a standard deviation for
    normal noise that one outlier cannot inflate); the range counts every repeat, the first too.
    """
    if len(values) < 2:
        return None, None
    mid = statistics.median(values)
    if not mid:
        return None, None
    mad = statistics.median(abs(v - mid) for v in values)
    return 100.0 * 1.4826 * mad / mid, 100.0 * (max(values) - min(values)) / mid


@dataclass
class _Warmup:
    """What the stabilising warm-up passes saw."""

    tok_s: list[float] = field(default_factory=list)
    stable: bool | None = None


async def _flush_cache(client: httpx.AsyncClient, base: str) -> bool:
    """Empty SGLang's prefix cache (it refuses while requests run); whether it did."""
    try:
        resp = await client.post(base + "/flush_cache")
    except httpx.HTTPError:
        return False
    return resp.status_code == 200


async def _stabilise(server: ServerProcess, client: httpx.AsyncClient, workload: Workload,
                     kwargs: Mapping[str, Any], pct: float, max_rounds: int) -> _Warmup:
    """Measured-workload passes until two in a row agree within ``pct`` percent.

    A fixed warm-up count was not enough for a MoE target on an H200: its first measured repeat
    was 10-36% slow (kernels compiled for prompt shapes the warm-up prompts had not had).
    """
    seen = _Warmup(stable=False)
    for _ in range(max_rounds):
        server.ensure_alive()
        await _flush_cache(client, server.url)
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


async def _measure_async(server: ServerProcess, workload: Workload, repeats: int,
                         speculative: bool, draft_forwards: bool = True, *,
                         settings: MeasureSettings | None = None,
                         ) -> tuple[list[BenchResult], list[PhaseProfile], dict | None, _Warmup]:
    base = server.url
    kwargs = workload.bench_kwargs()
    conc = kwargs.get("concurrency")
    limits = httpx.Timeout(30.0)
    stable_pct = settings.warmup_until_stable_pct if settings is not None else None
    warmup = _Warmup()
    async with httpx.AsyncClient(timeout=limits) as client:
        warm = workload.warmup()
        if warm:
            await run_benchmark(base, warm, **kwargs)
        if stable_pct is not None:
            warmup = await _stabilise(server, client, workload, kwargs, stable_pct,
                                      settings.warmup_max_rounds)
        benches: list[BenchResult] = []
        profiles: list[PhaseProfile] = []
        for _ in range(repeats):
            server.ensure_alive()
            if stable_pct is not None:
                await _flush_cache(client, base)
            before = await scrape(client, base)
            bench = await run_benchmark(base, workload.measured(), **kwargs)
            server.ensure_alive()
            after = await scrape(client, base)
            benches.append(bench)
            if bench.duration_s and bench.completed:
                profiles.append(PhaseProfile.from_snapshots(
                    before, after, wall_s=bench.duration_s, max_batch=conc or None,
                    speculative=speculative, meta_accept_length=bench.accept_length,
                    draft_forwards=draft_forwards, tok_s=bench.output_tok_s))
        info = None
        try:
            resp = await client.get(base + "/server_info")
            if resp.status_code == 200:
                info = resp.json()
        except (httpx.HTTPError, ValueError):
            info = None
    return benches, profiles, info, warmup


class _TrialTimeout(Exception):
    """The measurement ran past ``MeasureSettings.trial_timeout_s``."""


async def _within(coro: Any, timeout_s: float | None) -> Any:
    """Await ``coro``, cancelling it after ``timeout_s`` (None: no limit) with `_TrialTimeout`."""
    if timeout_s is None:
        return await coro
    limit = asyncio.timeout(max(timeout_s, 0.0))
    try:
        async with limit:
            return await coro
    except TimeoutError:
        if limit.expired():  # ours, not a timeout raised inside the measurement
            raise _TrialTimeout from None
        raise


def _wait_for_exit(server: ServerProcess, *, timeout_s: float) -> None:
    """Give a server whose requests just failed a moment to finish dying.

    A crashing server drops its connections a little before its process is gone; without this
    wait, a crash mid-measurement would be reported as failed requests instead of as a crash.
    """
    deadline = time.monotonic() + timeout_s
    while server.alive() and time.monotonic() < deadline:
        time.sleep(0.05)


def measure(config: Any, workload: Workload, settings: MeasureSettings = MeasureSettings(), *,
            name: str | None = None) -> TrialResult:
    """Run one config on a fresh server and summarise R measured runs.

    Args:
        config: A ``TrialConfig`` (server_args, env, backend, profile, model and draft paths).
        workload: The prompts and load shape.
        settings: Repeats, timeouts, where logs go.
        name: Used in log file names.

    Returns:
        The result, with ``status`` ``ok`` or ``failed`` (never an exception for a config fault).
    """
    t0 = time.monotonic()
    try:
        spec = launch_spec(config, settings)
    except (LaunchArgsError, ValueError) as exc:
        return _failed(config, None, f"invalid launch command: {exc}", failure=Failure.BAD_CONFIG,
                       t0=t0)
    if settings.validate:
        try:
            spec.validate()
        except LaunchArgsError as exc:
            return _failed(config, spec, f"invalid launch command: {exc}",
                           failure=Failure.BAD_CONFIG, t0=t0)
    # A null choice in the space means "make sure it is unset", even if the driver's env has it.
    unset = set(getattr(config, "unset_env", ()) or ())
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(spec.env)
    if get_backend(config.backend).emulated and settings.sim_seed is not None:
        env["AUTOTUNE_SIM_SEED"] = str(settings.sim_seed)
    workdir = Path(settings.workdir or tempfile.mkdtemp(prefix="autotune-trial-"))
    workdir.mkdir(parents=True, exist_ok=True)
    label = name or ("baseline" if config.is_baseline else "trial")
    log_path = workdir / f"{label}-{os.getpid()}-{int(time.time() * 1000)}.log"
    server = ServerProcess(lambda port: spec.argv(python=settings.python, port=port), env=env,
                           startup_timeout_s=min(settings.startup_timeout_s,
                                                 settings.trial_timeout_s or float("inf")),
                           grace_s=settings.grace_s, log_path=log_path, inherit_env=False)
    speculative = bool(spec.server_args.get("speculative_algorithm"))
    steps = spec.server_args.get("speculative_num_steps")
    # EAGLE with one step takes its only draft token from the re-extend: no draft forward at all.
    draft_forwards = not (speculative and steps is not None and int(steps) <= 1)
    try:
        with server:
            started = time.monotonic() - t0
            left = (None if settings.trial_timeout_s is None
                    else settings.trial_timeout_s - (time.monotonic() - t0))
            benches, profiles, info, warmup = asyncio.run(_within(
                _measure_async(server, workload, settings.repeats, speculative, draft_forwards,
                               settings=settings), left))
            if any(b.failed for b in benches):
                _wait_for_exit(server, timeout_s=3.0)
            server.ensure_alive()
            tail = server.log_tail()
    except (ServerStartupCrash, ServerStartupTimeout) as exc:
        kind, why = _startup_failure(exc)
        return _failed(config, spec, why, failure=kind, log_tail=exc.log_tail,
                       log_path=str(log_path), t0=t0)
    except _TrialTimeout:
        return _failed(config, spec, f"trial timeout: no result within measure.trial_timeout_s="
                       f"{settings.trial_timeout_s:g} s (a request stalled mid-stream, or the "
                       "workload is too long for the limit)", failure=Failure.HANG,
                       log_tail=server.log_tail(), log_path=str(log_path), t0=t0)
    except ServerCrashed as exc:
        return _failed(config, spec, f"server crashed during measurement (exit code {exc.returncode})",
                       failure=Failure.CRASH_DURING, log_tail=exc.log_tail, log_path=str(log_path),
                       t0=t0)
    except (ServerError, AutotuneError, httpx.HTTPError, OSError) as exc:
        return _failed(config, spec, f"{type(exc).__name__}: {exc}", failure=Failure.ERROR,
                       log_tail=server.log_tail() if server.log_path else None,
                       log_path=str(log_path), t0=t0)
    result = _summarise(config, spec, benches, profiles, info, tail=tail, log_path=str(log_path),
                        t0=t0, startup_s=started)
    result.warmup_tok_s, result.warmup_stable = warmup.tok_s, warmup.stable
    return result


def _summarise(config: Any, spec: LaunchSpec, benches: list[BenchResult],
               profiles: list[PhaseProfile], info: dict | None, *, tail: str, log_path: str,
               t0: float, startup_s: float) -> TrialResult:
    result = TrialResult(
        status=OK, reason=None, params=dict(config.params), is_baseline=config.is_baseline,
        launch_command=spec.shell_command(), argv=spec.argv(python="python"), env=spec.record_env(),
        log_tail=tail, log_path=log_path, server_info=info, startup_s=startup_s,
        **_acceptance(config))
    rates = [b.output_tok_s for b in benches if b.output_tok_s is not None and not b.failed]
    result.completed = sum(b.completed for b in benches)
    result.failed_requests = sum(b.failed for b in benches)
    if len(rates) < len(benches):
        errors: dict[str, int] = {}
        for b in benches:
            for msg, n in b.errors.items():
                errors[msg] = errors.get(msg, 0) + n
        worst = max(errors, key=errors.get) if errors else "no request completed"
        result.status, result.feasible = FAILED, False
        result.failure = Failure.REQUESTS_FAILED.value
        result.reason = f"{result.failed_requests} request(s) failed: {worst}"
        result.duration_s = time.monotonic() - t0
        return result
    result.output_tok_s_repeats = rates
    result.output_tok_s = _median(rates)
    result.output_tok_s_spread = (max(rates) - min(rates)) / 2 if len(rates) > 1 else None
    result.output_tok_s_spread_pct, result.output_tok_s_range_pct = spread_pct(rates)
    # The repeat whose tok/s is the median speaks for the others in every per-run figure.
    mid = sorted(range(len(benches)), key=lambda i: benches[i].output_tok_s)[len(benches) // 2]
    bench = benches[mid]
    result.decode_tok_s_p50 = bench.decode_tok_s_p50
    result.decode_tok_s_p90 = bench.decode_tok_s_p90
    for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
        for q in (50, 90, 99):
            setattr(result, f"{metric}_p{q}", getattr(bench, metric).get(q))
    result.records = [r for b in benches for r in b.iter_record_dicts()]
    profile = profiles[mid] if len(profiles) == len(benches) else (profiles[0] if profiles else None)
    if profile is not None:
        result.phases = profile.to_dict()
        result.accept_length = profile.accept_length
        result.accept_length_meta_info = profile.accept_length_meta_info
        result.accept_length_server_info = profile.accept_length_server_info
    result.duration_s = time.monotonic() - t0
    return result


def judge(result: TrialResult, baseline: TrialResult | None, *,
          slos: Sequence[tuple[str, str, float]] = (), min_speedup: float = 1.0) -> TrialResult:
    """Attach the baseline comparison and the verdict to a measured result.

    A speculative config is feasible only if it beats its baseline by ``min_speedup`` and meets
    every SLO. A baseline is feasible if it meets the SLOs. Failed stays failed.
    """
    result = replace(result, slo_violations=[],
                     baseline_status=baseline.status if baseline is not None else None)
    if not result.ok:
        result.feasible = False
        return result
    violations = []
    for metric, op, limit in slos:
        value = result.metric(metric)
        if value is None:
            violations.append(f"{metric} unknown (SLO {metric} {op} {limit})")
        elif slo_margin(value, op, limit) > 0:
            violations.append(f"{metric} = {value:.4g} violates {metric} {op} {limit}")
    result.slo_violations = violations
    if result.is_baseline:
        result.baseline_tok_s = result.output_tok_s
        result.baseline_status = None
        result.speedup = 1.0 if result.output_tok_s else None
        result.baseline_decode_step_ms = (result.phases or {}).get("cycle_ms")
        result.feasible = not violations
        result.status = FEASIBLE if result.feasible else INFEASIBLE
        result.reason = "; ".join(violations) or None
        return result
    if baseline is None or not baseline.ok or baseline.output_tok_s is None:
        result.feasible = False
        result.status = INFEASIBLE
        why = baseline.reason if baseline is not None else "not measured"
        result.reason = f"baseline unknown ({why}): cannot prove speculation pays"
        return result
    result.baseline_tok_s = baseline.output_tok_s
    result.baseline_decode_step_ms = (baseline.phases or {}).get("cycle_ms")
    result.speedup = speedup(result.output_tok_s, baseline.output_tok_s)
    cycle = (result.phases or {}).get("cycle_ms")
    result.break_even_accept_length = break_even(cycle, result.baseline_decode_step_ms)
    if result.phases is not None:
        result.phases = {**result.phases, "break_even_accept_length": result.break_even_accept_length,
                         "baseline_decode_step_ms": result.baseline_decode_step_ms,
                         "speedup": result.speedup}
    reasons = list(violations)
    if result.speedup is None or result.speedup <= min_speedup:
        sp = "unknown" if result.speedup is None else f"{result.speedup:.3f}x"
        reasons.insert(0, f"does not beat the baseline (speedup {sp}, needs > {min_speedup:g}x)")
    result.feasible = not reasons
    result.status = FEASIBLE if result.feasible else INFEASIBLE
    result.reason = "; ".join(reasons) or None
    return result


def slo_margin(value: float | None, op: str, limit: float) -> float:
    """The one SLO check: how far ``value`` is from meeting ``value op limit``, relative to the
    limit; ``<= 0`` met, ``> 0`` violated (the verdict and Optuna's constraint both read it).

    An unknown value violates (1.0). A strict bound is violated at equality.
    """
    if value is None:
        return 1.0
    if op not in ("<=", "<", ">=", ">"):
        raise ValueError(f"unknown SLO operator {op!r}")
    gap = (value - limit) if op in ("<=", "<") else (limit - value)
    margin = gap / max(abs(limit), 1e-9)
    return max(margin, 1e-12) if (op in ("<", ">") and gap >= 0) else margin


def _deterministic(failure: str | None) -> bool:
    try:
        return Failure(failure).deterministic
    except ValueError:  # no kind recorded (a store older than the field): worth one retry
        return False


def reusable_baseline(store: BaselineStore, key: str) -> TrialResult | None:
    """The stored baseline of a group, unless it failed for a reason that may not recur.

    A baseline that failed transiently (a start-up timeout, a crash mid-measurement) is measured
    once more instead of marking its whole group infeasible for the rest of the search.
    """
    found = store.get(key)
    if found is None or found.ok:
        return found
    retried = key + "#retried"
    # A failure a second start cannot fix is final; re-measuring it would only cost a start.
    if _deterministic(found.failure) or store.get(retried) is not None:
        return found
    store.put(retried, found)  # the first failure stays on record; a second one is final
    return None


def baseline_for(baseline_config: Any, workload: Workload, settings: MeasureSettings,
                 store: BaselineStore, *, slos: Sequence[tuple[str, str, float]] = (),
                 name: str = "baseline") -> tuple[TrialResult, bool]:
    """The group's baseline and whether it was measured by this call.

    Taken from the store when there; else measured once, while trials of the same group wait on
    the group's lock instead of each measuring it.
    """
    key = group_key(baseline_config)
    found = reusable_baseline(store, key)
    if found is not None:
        return found, False
    with store.lock(key):
        found = reusable_baseline(store, key)
        if found is not None:
            return found, False
        result = judge(measure(baseline_config, workload, settings, name=name), None, slos=slos)
        store.put(key, result)
        return result, True


def evaluate(config: Any, *, workload: Workload, baseline_config: Any | None = None,
             settings: MeasureSettings = MeasureSettings(), store: BaselineStore | None = None,
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


def settings_for(space: Any, *, workdir: str | None = None, repeats: int | None = None,
                 **overrides: Any) -> MeasureSettings:
    """Measurement settings from a space's ``measure:`` section."""
    m = space.measure
    overrides.setdefault("fast_start", bool(getattr(m, "fast_start", False)))
    overrides.setdefault("warmup_until_stable_pct", getattr(m, "warmup_until_stable_pct", None))
    overrides.setdefault("warmup_max_rounds", getattr(m, "warmup_max_rounds", 6))
    overrides.setdefault("device_timer", bool(getattr(m, "phase_profile", True)))
    return MeasureSettings(repeats=repeats or m.repeats, startup_timeout_s=m.startup_timeout_s,
                           trial_timeout_s=m.trial_timeout_s, workdir=workdir, **overrides)


def slos_of(space: Any) -> list[tuple[str, str, float]]:
    """A space's SLOs as ``(metric, op, limit)``."""
    return [(s.metric, s.op, s.value) for s in space.constraints.slos]


def main(argv: list[str] | None = None) -> int:
    """``python -m autotune.trial --space FILE --params JSON [--json]``."""
    import argparse

    from autotune.trial.report import phase_table, summary_json
    from autotune.space.search_space import load_space

    parser = argparse.ArgumentParser(
        prog="python -m autotune.trial",
        description="Evaluate one config of a search space and its no-speculation baseline.")
    cli.add_version(parser)
    parser.add_argument("--space", required=True, help="search space YAML")
    parser.add_argument("--params", default="{}",
                        help="JSON object of parameters, named as in ServerArgs or env vars")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--repeats", type=int, help="override measure.repeats")
    parser.add_argument("--workdir", help="where server logs go")
    parser.add_argument("--baseline-store", metavar="DIR",
                        help="reuse baselines kept in DIR (measured once, then shared by every "
                             "later call that names the same DIR)")
    args = parser.parse_args(argv)
    cli.interruptible()
    try:
        params = json.loads(args.params)
        if not isinstance(params, dict):
            raise ValueError("--params must be a JSON object")
    except ValueError as exc:
        print(f"error: --params: {exc}", file=sys.stderr)
        return 2
    try:
        space = load_space(args.space)
        reason = space.validate_config(params)
        if reason:
            print(f"error: --params: {reason}", file=sys.stderr)
            return 2
        if space.backend == "sglang":
            space.check_paths()
        config = space.trial_config(params)
        base_cfg = None if config.is_baseline else space.trial_config(space.baseline_params(params))
        settings = settings_for(space, workdir=args.workdir, repeats=args.repeats)
        workload = Workload.from_spec(space.workload, file=space.file)
        store = FileBaselineStore(args.baseline_store) if args.baseline_store else None
        result = evaluate(config, workload=workload, baseline_config=base_cfg, settings=settings,
                          store=store, slos=slos_of(space), min_speedup=space.constraints.min_speedup)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary_json(result), default=str))
    else:
        print(phase_table(result))
        print(f"\nLaunch command:\n{result.launch_command}")
        if not result.ok and result.log_tail:
            print("\nServer log tail:\n" + result.log_tail)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
