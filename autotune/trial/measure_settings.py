"""How a trial measures: :class:`MeasureSettings`, and the settings and SLOs a space asks for
(:func:`settings_for`, :func:`slos_of`). :mod:`autotune.trial.measure` runs a trial with them."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.backend import get_backend
from autotune.trial.sequential import SequentialRule
from autotune.trial.window import STEADY, WINDOWS

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

__all__ = ["MeasureSettings", "settings_for", "slos_of"]


@dataclass(frozen=True)
class MeasureSettings:
    """How a trial measures.

    Attributes:
        repeats: Measured runs of the workload on one server; the median is reported. With
            ``sequential`` and a ``consult`` given to :func:`measure`, the primary level runs in
            rounds instead, up to ``sequential.max_rounds``, until ``consult`` says stop (another
            level likewise with its own from ``consult_at``).
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
        flush_cache: Flush SGLang's prefix cache (``/flush_cache``) before every measured repeat
            (True) or keep it (False: a repeat may reuse the prefixes the one before cached);
            None: flush exactly when ``warmup_until_stable_pct`` is set (``measure.flush_cache``).
        device_timer: Run with SGLang's CUDA-event device timer (``measure.phase_profile``);
            off, the profile has wall-clock figures only.
        gpu_telemetry: Sample the server's GPUs through NVML over each measured repeat
            (:mod:`autotune.profile.telemetry`): True, False, or None for whenever the backend
            runs on GPUs (real SGLang, not the emulator).
        lean_start: Start and stop trial servers the lean way (:mod:`autotune.sglang.trial_start`:
            decode CUDA graphs only up to the workload's concurrency, no SGLang warm-up request
            where the trial warms up itself, no crash-diagnostics pause at shutdown), all
            trial-only. Off: the launch as exported (``measure.lean_start: false``).
        standby: Launch each server but a process's first by a standby launcher started while the
            server before it started up (:mod:`autotune.trial.standby_slot`, ``measure.standby``).
        prefork: The standby also imports the server's child processes' modules in a fork server,
            and they are forked from it where that is the same as a spawn (``measure.prefork``;
            only with ``standby``).
        window: Which window a repeat's tok/s is over (``measure.window``): ``steady`` (ramp-up
            and tail left out where the steady interval is usable, :mod:`autotune.trial.window`)
            or ``whole``.
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
    flush_cache: bool | None = None
    device_timer: bool = True
    gpu_telemetry: bool | None = None
    lean_start: bool = True
    standby: bool = False
    prefork: bool = False
    sequential: SequentialRule | None = None
    window: str = STEADY

    def __post_init__(self) -> None:
        if self.window not in WINDOWS:
            raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {self.window!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.warmup_until_stable_pct is not None and not self.warmup_until_stable_pct > 0:
            raise ValueError("warmup_until_stable_pct must be > 0 or None, got "
                             f"{self.warmup_until_stable_pct}")
        if self.warmup_max_rounds < 2:
            raise ValueError(f"warmup_max_rounds must be >= 2, got {self.warmup_max_rounds}")
        if self.trial_timeout_s is not None and not self.trial_timeout_s > 0:
            raise ValueError(f"trial_timeout_s must be > 0 or None, got {self.trial_timeout_s}")


def settings_for(space: SearchSpace, *, workdir: str | None = None, repeats: int | None = None,
                 **overrides: Any) -> MeasureSettings:
    """Measurement settings from a space's ``measure:`` section."""
    m = space.measure
    overrides.setdefault("fast_start", bool(getattr(m, "fast_start", False)))
    overrides.setdefault("warmup_until_stable_pct", getattr(m, "warmup_until_stable_pct", None))
    overrides.setdefault("warmup_max_rounds", getattr(m, "warmup_max_rounds", 6))
    overrides.setdefault("flush_cache", getattr(m, "flush_cache", None))
    overrides.setdefault("device_timer", bool(getattr(m, "phase_profile", True)))
    overrides.setdefault("lean_start", bool(getattr(m, "lean_start", True)))
    backend = get_backend(space.backend)
    standby = getattr(m, "standby", None)
    overrides.setdefault("standby", backend.standby_by_default if standby is None else standby)
    prefork = getattr(m, "prefork", None)
    if prefork is None:
        prefork = backend.prefork_by_default and not space.varying_env() & set(backend.prefork_import_reads)
    overrides.setdefault("prefork", overrides["standby"] and prefork)
    overrides.setdefault("window", getattr(m, "window", STEADY))
    seq = getattr(m, "sequential", None)
    if seq is not None:
        overrides.setdefault("sequential", SequentialRule(min_rounds=seq.min_rounds, max_rounds=seq.max_rounds,
                                                          confidence=seq.confidence))
    return MeasureSettings(repeats=repeats or m.repeats, startup_timeout_s=m.startup_timeout_s,
                           trial_timeout_s=m.trial_timeout_s, workdir=workdir, **overrides)


def slos_of(space: SearchSpace) -> list[tuple[str, str, float]]:
    """A space's SLOs as ``(metric, op, limit)``."""
    return [(s.metric, s.op, s.value) for s in space.constraints.slos]
