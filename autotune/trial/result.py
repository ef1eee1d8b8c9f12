"""What one trial measured: :class:`TrialResult`, and how a result is built from the runs.

A result is one flat record (every unknown None) that travels as JSON between a trial process,
the baseline store, Optuna, MLflow and the replay landscapes. :func:`summarise` turns the
measured repeats and their phase profiles into one, the repeat with the median tok/s speaking for
the others; :func:`failed_result` records a failure with its kind and log tail instead of raising.
They live apart from the launch and the HTTP loop so that readers of results need neither.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from autotune.bench.records import BenchResult, percentile
from autotune.bench.steady import SteadyWindow
from autotune.launch.serving import serving_spec
from autotune.launch.spec import LaunchSpec
from autotune.profile.load import LoadWindow, trial_load
from autotune.profile.phases import PhaseProfile
from autotune.profile.telemetry import GpuSampler, GpuWindow, repeat_figures, trial_figures, window_detail
from autotune.space import synthetic
from autotune.trial.gpu_time import GpuTime
from autotune.trial.outcome import Failure, Status
from autotune.trial.window import STEADY, objective_rates
from autotune.trial.winner import metric_field

if TYPE_CHECKING:
    from autotune.space.trial_config import TrialConfig


@dataclass
class TrialResult:
    """Everything one trial measured. Every unknown is None; a failure keeps its log tail and
    its :class:`~autotune.trial.outcome.Failure` kind (``failure``, the enum's value)."""

    status: str  # a Status (a plain string once read back from JSON)
    reason: str | None
    params: dict[str, Any]
    is_baseline: bool
    failure: str | None = None
    launch_command: str | None = None
    # What to serve with: the launch as measured less its measuring devices (forced acceptance,
    # emulator variables, trial-only args), by autotune.launch.serving, as the export writes it.
    serve_command: str | None = None
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    output_tok_s: float | None = None
    output_tok_s_spread: float | None = None
    output_tok_s_repeats: list[float] = field(default_factory=list)
    # Robust spread: 1.4826 * MAD over the median, in percent; the range: (max - min) / median.
    output_tok_s_spread_pct: float | None = None
    output_tok_s_range_pct: float | None = None
    # Which window output_tok_s is over (autotune.trial.window.objective_rates): "steady" (the
    # repeats' steady intervals, ramp-up and tail left out) or "whole"; window_reason says why the
    # whole window speaks where the steady one was asked. Both figures are kept: the median of the
    # whole windows, and of the steady intervals where every repeat has one (else None), each with its
    # robust spread and range over the repeats (spread_pct), and the steady interval's median share of
    # the window and its length in waves.
    window: str | None = None
    window_reason: str | None = None
    output_tok_s_whole: float | None = None
    output_tok_s_steady: float | None = None
    output_tok_s_whole_spread_pct: float | None = None
    output_tok_s_whole_range_pct: float | None = None
    output_tok_s_steady_spread_pct: float | None = None
    output_tok_s_steady_range_pct: float | None = None
    steady_share_pct: float | None = None
    steady_waves: float | None = None
    # One dict a measured repeat, in order (repeat_breakdown), so a spread can be taken apart:
    # tok/s against accept length, the decode cycle and the prefill GPU time of that repeat.
    repeat_breakdown: list[dict[str, Any]] = field(default_factory=list)
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
    # When the trial began, in seconds since the epoch (its wall clock; duration_s runs from it):
    # its MLflow run's start time, so the UI's Duration is the trial's own. None when not measured.
    started_at: float | None = None
    startup_s: float | None = None
    # GPU telemetry over all measured repeats together (autotune.profile.telemetry.trial_figures);
    # None without a sampler (the emulator, no pynvml, NVML failing): gpu_telemetry["note"] says why.
    gpu_util_pct_mean: float | None = None
    gpu_mem_peak_gib: float | None = None
    gpu_power_w_mean: float | None = None
    gpu_energy_j: float | None = None
    tok_s_per_w: float | None = None
    j_per_token: float | None = None
    gpu_telemetry: dict[str, Any] | None = None
    # The load the server really ran over the measured windows (autotune.profile.load.trial_load):
    # the concurrency asked, the server's cap, the most it ran at once, the most it queued, the share
    # of the window below min(asked, cap) (server gauges) and below asked (client's own timeline).
    # load_capped: the server held part of the asked load back in some window; load_note says so.
    # The prompt lengths the server counted over the speaking repeat (autotune.bench.workload_shape).
    input_tokens_p10: float | None = None
    input_tokens_p50: float | None = None
    input_tokens_p90: float | None = None
    load_asked: int | None = None
    load_cap: int | None = None
    load_ran: int | None = None
    load_queued: int | None = None
    load_tail_pct: float | None = None
    load_client_tail_pct: float | None = None
    load_capped: bool | None = None
    load_capped_windows: int | None = None
    load_note: str | None = None
    # Set by the verdict (trial.verdict.judge) when the config or its baseline was capped: what
    # load each sustained, since the speedup compares them at those loads.
    load_comparison: str | None = None
    # With ``workload.concurrency: [1, 8, 64]``: one record per level (autotune.trial.level_results), each
    # judged against the baseline's same level; the fields above are the primary level's.
    levels: list[dict[str, Any]] | None = None
    # Where the server's GPU time went (start-up, warm-up, measurement, teardown; autotune.trial.gpu_time),
    # a failed server's too; None when no server was started (a refused launch, an invalid config).
    gpu_time: GpuTime | None = None
    # With ``measure.sequential``: how the rounds ended (autotune.trial.sequential): ``decision``
    # (``stop-worse`` is a trial aborted early: its figures are what it measured), ``rounds``, the
    # ``incumbent`` it was compared with, the rule; None when it measured a fixed ``repeats``.
    sequential: dict[str, Any] | None = None
    # With ``measure.standby``: whether a standby launched the server (``used``, ``why_not``,
    # ``import_s``, ``started_s_before``, its fork server's report ``prefork`` and its main-block
    # imports' ``main_block``), what became of those in the server (``children``: forked or spawned;
    # ``main_block_checked``: checked, or the launcher re-executed and why), how long the measurement
    # waited for the next one (``next_waited_s``, counted as warm-up), why that one was ended before
    # the measurement (``next_ended``), and its CPU seconds over the measurement
    # (``next_cpu_s_measuring``, 0 when it stayed idle as it must).
    standby: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status in (Status.OK, Status.FEASIBLE, Status.INFEASIBLE)

    def metric(self, name: str) -> float | None:
        """A metric by the name SLOs and objectives use (``p99_ttft_ms`` or ``ttft_ms_p99``)."""
        value = getattr(self, metric_field(name), None)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def to_dict(self, *, records: bool = False) -> dict[str, Any]:
        """JSON-ready form. Records are left out unless asked for."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("records", "server_info")}
        out["gpu_time"] = self.gpu_time.to_dict() if self.gpu_time is not None else None
        if records:
            out["records"] = self.records
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TrialResult":
        known = set(cls.__dataclass_fields__)
        fields = {k: v for k, v in data.items() if k in known}
        if isinstance(fields.get("gpu_time"), Mapping):
            fields["gpu_time"] = GpuTime.from_dict(fields["gpu_time"])
        return cls(**fields)


def _acceptance(config: TrialConfig) -> dict[str, Any]:
    env = getattr(config, "env", None) or {}
    speculative = not config.is_baseline
    return {"acceptance": synthetic.acceptance_source(env, speculative=speculative),
            "synthetic_accept_length": synthetic.forced_accept_length(env) if speculative else None}


def failed_result(config: TrialConfig, spec: LaunchSpec | None, reason: str, *, failure: Failure,
                  log_tail: str | None = None, log_path: str | None = None,
                  t0: float | None = None, gpu_time: GpuTime | None = None) -> TrialResult:
    """A failed trial's result: its reason and kind, the launch (``spec``, None when refused), and
    the GPU time its server held (``gpu_time``, None when none was started)."""
    took, began = _since(t0) if t0 else (None, None)
    return TrialResult(
        status=Status.FAILED, reason=reason, params=dict(config.params),
        is_baseline=config.is_baseline,
        failure=failure.value,
        launch_command=spec.shell_command() if spec else None,
        argv=spec.argv(python="python") if spec else None, env=spec.record_env() if spec else None,
        log_tail=log_tail, log_path=log_path, feasible=False,
        duration_s=took, started_at=began, gpu_time=gpu_time, **_acceptance(config))


def stopped_result(params: Mapping[str, Any], *, is_baseline: bool, rounds: int, cap: int | None,
                   tok_s: Sequence[float], gpu_time: GpuTime | None,
                   sequential: Mapping[str, Any] | None = None, by: str = "the scheduler") -> TrialResult:
    """A trial Ray Tune stopped after round ``rounds`` (``by``: a scheduler, the wall-time budget):
    its rounds' tok/s kept as its repeats, its GPU time up to then (no teardown seen: None), and no
    objective figure (``output_tok_s`` None: a partial measurement, never judged, is no value to
    compare or rank)."""
    of = f" of at most {cap}" if cap is not None else ""
    return TrialResult(
        status=Status.STOPPED, params=dict(params), is_baseline=is_baseline, feasible=False,
        reason=(f"stopped by {by} after round {rounds}{of}: its objective is unknown "
                "(the rounds so far are kept)"),
        output_tok_s_repeats=[float(x) for x in tok_s],
        duration_s=gpu_time.wall_s if gpu_time is not None else None, gpu_time=gpu_time,
        sequential={**(sequential or {}), "decision": "stopped-by-scheduler", "rounds": rounds})


def _since(t0: float) -> tuple[float, float]:
    """``(duration_s, started_at)`` of a trial whose monotonic clock started at ``t0``: its seconds
    so far, and the wall clock then (seconds since the epoch, for its MLflow run's start)."""
    took = time.monotonic() - t0
    return took, time.time() - took


def set_load(result: TrialResult, load: Mapping[str, Any] | None) -> None:
    """Copy a :func:`~autotune.profile.load.trial_load` summary into ``result``'s ``load_*`` fields."""
    if load is None:
        return
    for key in ("asked", "cap", "ran", "queued", "tail_pct", "client_tail_pct", "capped",
                "capped_windows", "note"):
        setattr(result, f"load_{key}", load.get(key))


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


def repeat_breakdown(benches: Sequence[BenchResult], profiles: Sequence[PhaseProfile],
                     windows: Sequence[GpuWindow] | None = None,
                     steady: Sequence[SteadyWindow] = ()) -> list[dict[str, Any]]:
    """Per measured repeat: tok/s, wall, TTFT and, when each repeat has its profile, its parts.

    With the device timer, ``prefill_s`` is the repeat's prefill GPU seconds, ``cycle_gpu_s``
    the GPU seconds of every other category (draft, verify, re-extend or decode) and ``host_s``
    the rest of the wall: tok/s moves with ``accept_length`` or with one of the three. With a
    GPU window a repeat (``windows``), its telemetry too (``gpu_power_w_mean``, ``j_per_token``...);
    with a steady interval a repeat (``steady``), its tok/s and share of the window
    (``steady_tok_s``, ``steady_share_pct``); ``tok_s`` is the whole window's.
    """
    paired = len(profiles) == len(benches)
    out = []
    for i, bench in enumerate(benches):
        row: dict[str, Any] = {"tok_s": bench.output_tok_s, "wall_s": bench.duration_s,
                               "ttft_ms_p50": bench.ttft_ms.get(50)}
        if windows is not None and len(windows) == len(benches):
            row.update(repeat_figures(windows[i], bench.total_completion_tokens))
        if len(steady) == len(benches):
            share = steady[i].share
            row.update(steady_tok_s=steady[i].tok_s, steady_share_pct=None if share is None else 100.0 * share)
        p = profiles[i] if paired else None
        if p is not None:
            row.update(accept_length=p.accept_length, cycles=p.cycles)
            if p.device_timer:
                # From the profile's per-cycle figures, so its rules hold here too: a phase the
                # mode cannot run is a known 0, a series missing where it must run is unknown.
                cycle = (p.draft_ms, p.verify_ms, p.extend_ms, p.decode_ms, p.gpu_other_ms)
                known = [ms for ms in cycle if ms is not None]
                row.update(prefill_s=_seconds(p.prefill_ms, p.cycles),
                           cycle_gpu_s=_seconds(math.fsum(known) if len(known) == len(cycle) else None,
                                                p.cycles),
                           host_s=_seconds(p.other_ms, p.cycles))
        out.append(row)
    return out


def _seconds(ms_per_cycle: float | None, cycles: float | None) -> float | None:
    return None if ms_per_cycle is None or cycles is None else ms_per_cycle * cycles / 1e3


def summarise(config: TrialConfig, spec: LaunchSpec, benches: list[BenchResult],
              profiles: list[PhaseProfile], info: dict | None, *, tail: str, log_path: str,
              t0: float, startup_s: float, windows: Sequence[GpuWindow] = (),
              sampler: GpuSampler | None = None, loads: Sequence[LoadWindow] = (),
              window: str = STEADY) -> TrialResult:
    """One result from a server's measured repeats (``ok``, or ``failed`` if requests failed).

    ``windows`` are the GPU telemetry windows of the repeats (one each, from ``sampler``); the
    telemetry figures stay None without them; ``loads`` are the repeats' server loads
    (:func:`autotune.profile.load.trial_load` gives the ``load_*`` figures); ``window`` is
    ``measure.window``, which :func:`autotune.trial.window.objective_rates` applies.
    """
    result = TrialResult(
        status=Status.OK, reason=None, params=dict(config.params), is_baseline=config.is_baseline,
        launch_command=spec.shell_command(), serve_command=serving_spec(spec).shell_command(),
        argv=spec.argv(python="python"), env=spec.record_env(),
        log_tail=tail, log_path=log_path, server_info=info, startup_s=startup_s,
        **_acceptance(config))
    rates = [b.output_tok_s for b in benches if b.output_tok_s is not None and not b.failed]
    set_load(result, trial_load(loads))
    result.completed = sum(b.completed for b in benches)
    result.failed_requests = sum(b.failed for b in benches)
    if len(rates) < len(benches):
        errors: dict[str, int] = {}
        for b in benches:
            for msg, n in b.errors.items():
                errors[msg] = errors.get(msg, 0) + n
        worst = max(errors, key=errors.__getitem__) if errors else "no request completed"
        result.status, result.feasible = Status.FAILED, False
        result.failure = Failure.REQUESTS_FAILED.value
        result.reason = f"{result.failed_requests} request(s) failed: {worst}"
        result.duration_s, result.started_at = _since(t0)
        return result
    chosen = objective_rates(benches, loads, window=window)
    result.window, result.window_reason = chosen.window, chosen.reason
    result.output_tok_s_whole = _median(chosen.whole)
    result.output_tok_s_steady = chosen.steady_median("tok_s")
    steady_rates = [x.tok_s for x in chosen.steady if x.tok_s is not None]
    result.output_tok_s_whole_spread_pct, result.output_tok_s_whole_range_pct = spread_pct(chosen.whole)
    if result.output_tok_s_steady is not None:
        result.output_tok_s_steady_spread_pct, result.output_tok_s_steady_range_pct = spread_pct(steady_rates)
    share = chosen.steady_median("share")
    result.steady_share_pct = None if share is None else 100.0 * share
    result.steady_waves = chosen.steady_median("waves")
    rates = chosen.rates
    result.output_tok_s_repeats = rates
    result.output_tok_s = _median(rates)
    result.output_tok_s_spread = (max(rates) - min(rates)) / 2 if len(rates) > 1 else None
    result.output_tok_s_spread_pct, result.output_tok_s_range_pct = spread_pct(rates)
    result.repeat_breakdown = repeat_breakdown(benches, profiles, windows or None, chosen.steady)
    if sampler is not None:
        result.gpu_telemetry = sampler.describe()
        if len(windows) == len(benches):
            tokens = [b.total_completion_tokens for b in benches]
            for name, value in trial_figures(windows, tokens).items():
                setattr(result, name, value)
            result.gpu_telemetry.update(window_detail(windows))
    # The repeat whose tok/s is the median speaks for the others in every per-run figure.
    # Every repeat measured a rate here (fewer rates than benches returned above): rates[i] is
    # benches[i]'s.
    mid = sorted(range(len(benches)), key=lambda i: rates[i])[len(benches) // 2]
    bench = benches[mid]
    result.decode_tok_s_p50 = bench.decode_tok_s_p50
    result.decode_tok_s_p90 = bench.decode_tok_s_p90
    for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
        for q in (50, 90, 99):
            setattr(result, f"{metric}_p{q}", getattr(bench, metric).get(q))
    result.records = [r for b in benches for r in b.iter_record_dicts()]
    counted = [float(r.prompt_tokens) for r in bench.records if r.ok and r.prompt_tokens is not None]
    result.input_tokens_p10, result.input_tokens_p50, result.input_tokens_p90 = (
        percentile(counted, 10), percentile(counted, 50), percentile(counted, 90))
    profile = profiles[mid] if len(profiles) == len(benches) else (profiles[0] if profiles else None)
    if profile is not None:
        result.phases = profile.to_dict()
        result.accept_length = profile.accept_length
        result.accept_length_meta_info = profile.accept_length_meta_info
        result.accept_length_server_info = profile.accept_length_server_info
    steps = spec.server_args.get("speculative_num_steps")
    ignored = synthetic.not_taken(result.synthetic_accept_length, result.accept_length,
                                  profile.cycles if profile is not None else None,
                                  int(steps) if steps is not None else None)
    if ignored is not None:
        result.status, result.feasible = Status.FAILED, False
        result.failure, result.reason = Failure.FORCED_ACCEPT_IGNORED.value, ignored
    result.duration_s, result.started_at = _since(t0)
    return result

