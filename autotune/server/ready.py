"""Readiness polling: asking a starting server's health URL until it answers 200.

A server that loads weights for minutes answers connection errors or 503 meanwhile; the poll
also watches the process itself, so a crash during start-up ends the wait at once instead of at
the deadline, and a ``stop()`` from another thread cancels it. The outcome is returned, not
raised, so :class:`~autotune.server.process.ServerProcess` can build its errors with the log tail.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal, NamedTuple

import httpx

__all__ = ["ReadyOutcome", "poll_ready"]


class ReadyOutcome(NamedTuple):
    """How a readiness poll ended.

    Attributes:
        kind: ``ready`` (200 from the live process), ``exited`` (the process exited first),
            ``timeout`` (alive but not ready in time) or ``cancelled`` (``cancel`` was set).
        status: The exit status, for ``exited``.
        last: The last answer before a ``timeout`` (``HTTP 503``, a connection error).
    """

    kind: Literal["ready", "exited", "timeout", "cancelled"]
    status: int | None = None
    last: str = ""


def poll_ready(url: str, *, exit_status: Callable[[], int | None], timeout_s: float,
               health_timeout_s: float, poll_interval_s: float,
               cancel: threading.Event) -> ReadyOutcome:
    """Poll ``url`` every ``poll_interval_s`` until it answers 200 or ``timeout_s`` passes.

    Args:
        url: The health URL.
        exit_status: The server's exit status without reaping it, None while it runs.
        timeout_s: Seconds from now until ``timeout``.
        health_timeout_s: Per-request timeout of one health check.
        poll_interval_s: Seconds between health checks.
        cancel: Set by another thread to stop waiting.
    """
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    with httpx.Client(trust_env=False) as client:  # trust_env: never send 127.0.0.1 to a proxy
        while True:
            status = exit_status()
            if status is not None:
                return ReadyOutcome("exited", status)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ReadyOutcome("timeout", last=last)
            try:
                response = client.get(url, timeout=httpx.Timeout(min(health_timeout_s, remaining)))
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if response.status_code == 200:
                    status = exit_status()
                    if status is not None:  # something else answered on our port
                        return ReadyOutcome("exited", status)
                    return ReadyOutcome("ready")
                last = f"HTTP {response.status_code}"
            if cancel.wait(max(0.0, min(poll_interval_s, deadline - time.monotonic()))):
                return ReadyOutcome("cancelled")
