"""The one map from what ended a trial (exception type, exit code, OOM in the log) to a Failure kind."""

from __future__ import annotations

import json

import httpx
import pytest

from autotune.errors import LaunchArgsError, ServerCrashed, ServerError, ServerStartupCrash, ServerStartupTimeout
from autotune.trial.outcome import Failure, Status, TrialTimeout, failure_of


@pytest.mark.parametrize(("exc", "kind", "reason"), [
    (ServerStartupTimeout("slow"), Failure.STARTUP_TIMEOUT, "start-up timeout"),
    # The timeout wins over an OOM-looking log: the server was still alive.
    (ServerStartupTimeout("slow", log_tail="CUDA out of memory"), Failure.STARTUP_TIMEOUT,
     "start-up timeout"),
    (ServerStartupCrash("died", log_tail="torch.OutOfMemoryError: ...", returncode=1),
     Failure.OOM, "out of memory at start-up"),
    (ServerStartupCrash("died", log_tail="RuntimeError: Not enough memory. Please try to ..."),
     Failure.OOM, "not enough memory for the KV cache"),
    (ServerStartupCrash("died", log_tail="Traceback ...", returncode=-11), Failure.CRASH_AT_START,
     "crashed at start-up (exit code -11)"),
    (ServerStartupCrash("died"), Failure.CRASH_AT_START, "crashed at start-up"),
    (TrialTimeout(), Failure.HANG, "trial timeout: no result within measure.trial_timeout_s=30 s"),
    (ServerCrashed("gone", returncode=-9), Failure.CRASH_DURING,
     "server crashed during measurement (exit code -9)"),
    (ServerError("odd"), Failure.ERROR, "ServerError: odd"),
    (httpx.ConnectError("refused"), Failure.ERROR, "ConnectError: refused"),
    (OSError("disk full"), Failure.ERROR, "OSError: disk full"),
    # Raised after the launch (by the server group, not by the parser): an error, not a bad config.
    (LaunchArgsError("bad flag"), Failure.ERROR, "LaunchArgsError: bad flag"),
])
def test_failure_kind_of_each_exception(exc: BaseException, kind: Failure, reason: str) -> None:
    got, why = failure_of(exc, trial_timeout_s=30.0)
    assert got is kind
    assert why.startswith(reason)


@pytest.mark.parametrize("exc", [LaunchArgsError("unknown flag --foo"), ValueError("bad tp")])
def test_refused_launch_is_a_bad_config(exc: Exception) -> None:
    assert failure_of(exc, launched=False) == (Failure.BAD_CONFIG, f"invalid launch command: {exc}")


def test_deterministic_kinds() -> None:
    assert {k for k in Failure if k.deterministic} == {Failure.OOM, Failure.CRASH_AT_START,
                                                       Failure.BAD_CONFIG}


def test_status_is_its_string() -> None:
    assert Status.FAILED == "failed" and f"{Status.FEASIBLE}" == "feasible"
    assert json.dumps({"status": Status.INFEASIBLE}) == '{"status": "infeasible"}'
    assert Status("ok") is Status.OK
