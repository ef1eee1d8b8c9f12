"""What a trial's outcome can be: its :class:`Status`, and for a failure its :class:`Failure` kind.

A trial ends ``ok`` (measured, not yet judged), ``feasible``, ``infeasible`` (it ran but lost to
its baseline or broke an SLO), ``failed``, or ``stopped`` (a Ray Tune scheduler ended it after a
round: its rounds so far are kept, its objective is unknown); a failure also carries the kind of
what went wrong, which decides whether a second start is worth it. Both are ``str`` enums, so a status compares
equal to the plain string stored in JSON records, Optuna attributes and MLflow tags.
:func:`failure_of` is the one place an exception caught around a trial becomes a kind and a reason.
"""

from __future__ import annotations

import enum

from autotune.errors import ServerCrashed, ServerStartupCrash, ServerStartupTimeout


class Status(enum.StrEnum):
    """A trial's outcome, as ``TrialResult.status`` and the records and tags hold it."""

    OK = "ok"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    FAILED = "failed"
    #: A scheduler of the user's (``search.scheduler``) stopped the trial after a round, before
    #: its measurement was complete and judged: never feasible, never a value for the incumbent.
    STOPPED = "stopped"


class Failure(str, enum.Enum):
    """Why a trial failed: the one map from what happened to a typed kind.

    Decided by :func:`failure_of` from the exception's type and the server's exit code; only
    out-of-memory is read from the server's log, which is SGLang's only signal of it.
    """

    OOM = "oom"
    CRASH_AT_START = "crash_at_start"
    STARTUP_TIMEOUT = "startup_timeout"
    CRASH_DURING = "crash_during_measurement"
    HANG = "hang"
    BAD_CONFIG = "bad_config"
    REQUESTS_FAILED = "requests_failed"
    #: Synthetic acceptance: the server's measured accept length is not the one its launch forced.
    FORCED_ACCEPT_IGNORED = "forced_accept_ignored"
    ERROR = "error"

    @property
    def deterministic(self) -> bool:
        """A second start of the same config would fail the same way."""
        return self in (Failure.OOM, Failure.CRASH_AT_START, Failure.BAD_CONFIG)


class TrialTimeout(Exception):
    """The measurement ran past ``MeasureSettings.trial_timeout_s``."""


def is_oom_log(text: str) -> bool:
    """Whether a server's log tail (or a failure reason read from it) says it ran out of GPU
    memory at start-up, as :func:`failure_of` reads it."""
    return "OutOfMemoryError" in text or "out of memory" in text.lower() or "Not enough memory" in text


def failure_of(exc: BaseException, *, launched: bool = True,
               trial_timeout_s: float | None = None) -> tuple[Failure, str]:
    """The kind and the reason of a trial failure, from the exception that ended the trial.

    Args:
        exc: What was caught.
        launched: False when the exception came before any server was started (the launch
            command was refused): always a bad config then.
        trial_timeout_s: The limit a :class:`TrialTimeout` ran past, for the reason.
    """
    if not launched:
        return Failure.BAD_CONFIG, f"invalid launch command: {exc}"
    if isinstance(exc, ServerStartupTimeout):
        return Failure.STARTUP_TIMEOUT, "start-up timeout: the server never became healthy"
    if isinstance(exc, ServerStartupCrash):
        tail = exc.log_tail or ""
        if "OutOfMemoryError" in tail or "out of memory" in tail.lower():
            return Failure.OOM, "out of memory at start-up (CUDA out of memory)"
        if "Not enough memory" in tail:
            return Failure.OOM, "not enough memory for the KV cache at start-up"
        code = exc.returncode
        return Failure.CRASH_AT_START, (f"crashed at start-up (exit code {code})"
                                        if code is not None else "crashed at start-up")
    if isinstance(exc, TrialTimeout):
        return Failure.HANG, (f"trial timeout: no result within measure.trial_timeout_s="
                              f"{trial_timeout_s:g} s (a request stalled mid-stream, or the "
                              "workload is too long for the limit)")
    if isinstance(exc, ServerCrashed):
        return Failure.CRASH_DURING, f"server crashed during measurement (exit code {exc.returncode})"
    return Failure.ERROR, f"{type(exc).__name__}: {exc}"
