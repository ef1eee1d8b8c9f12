"""Fault injection for the SGLang emulator, so every failure path of a trial can be tested here.

The emulator reads ``AUTOTUNE_SIM_FAULT``: a comma-separated list of faults, each ``name`` or
``name:value``. Faults combine (``slow_start:5,crash_after_requests:3``).

=========================== ==================================================================
``crash_at_start``          Die during start-up (after "Load weight begin"), exit code 1, with a
                            traceback in the log. ``/health`` never turned 200.
``oom``                     Die during start-up with a ``torch.OutOfMemoryError: CUDA out of
                            memory`` traceback, whatever the memory model says. Exit code 1.
``never_healthy``           Start and stay alive, but ``/health`` and ``/ready`` answer 503
                            forever and no request is served (a hung start-up).
``slow_start:S``            Start-up takes ``S`` seconds (overrides the profile and
                            ``AUTOTUNE_SIM_STARTUP_S``).
``crash_after_requests:N``  Serve ``N`` generation requests normally; the next one kills the
                            process mid-stream (after its first chunk), exit code 1. Health
                            checks and the start-up warm-up do not count.
``crash_after_s:S``         Kill the process ``S`` seconds after it became ready, exit code 1,
                            whatever is in flight.
``hang_mid_stream:N``       After ``N`` generated tokens of any request, stop sending: the
                            connection and the process stay alive, nothing more arrives.
=========================== ==================================================================

A crash is ``os._exit(code)`` after logging a traceback-like message, so open connections drop
the way they do when a real scheduler process dies.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

FAULT_ENV = "AUTOTUNE_SIM_FAULT"

_FLAGS = ("crash_at_start", "oom", "never_healthy")
_INTS = ("crash_after_requests", "hang_mid_stream")
_FLOATS = ("slow_start", "crash_after_s")

logger = logging.getLogger("autotune.sim")

# Where a real scheduler would have been when it died: (file, line, function, code) frames.
_INIT = ("managers/scheduler.py", 3098, "run_scheduler_process",
         "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)")
_RUNNER = "model_executor/model_runner.py"
_FRAMES: dict[str, list[tuple[str, int, str, str]]] = {
    "__init__": [_INIT, (_RUNNER, 402, "init_torch_distributed",
                         "torch.get_device_module(self.device).set_device(self.gpu_id)")],
    "load_model": [_INIT, (_RUNNER, 871, "load_model",
                           "self.model = get_model(model_config=self.model_config, ...)")],
    "init_memory_pool": [_INIT, (_RUNNER, 1533, "init_memory_pool",
                                 "self.token_to_kv_pool = MHATokenToKVPool(self.max_total_num_tokens, ...)")],
    "event_loop_overlap": [
        ("managers/scheduler.py", 3112, "run_scheduler_process", "scheduler.event_loop_overlap()"),
        ("managers/scheduler.py", 1187, "event_loop_overlap", "batch_result = self.run_batch(batch)")],
}


@dataclass(frozen=True)
class FaultPlan:
    """The faults to inject into one emulator process. All off by default."""

    crash_at_start: bool = False
    oom: bool = False
    never_healthy: bool = False
    slow_start: float | None = None
    crash_after_requests: int | None = None
    crash_after_s: float | None = None
    hang_mid_stream: int | None = None

    @property
    def active(self) -> list[str]:
        """The faults that are on, as ``name`` or ``name:value`` (for logs and ``/server_info``)."""
        out: list[str] = []
        for name in _FLAGS:
            if getattr(self, name):
                out.append(name)
        for name in _INTS + _FLOATS:
            value = getattr(self, name)
            if value is not None:
                out.append(f"{name}:{value:g}" if isinstance(value, float) else f"{name}:{value}")
        return out


def parse_faults(spec: str | None) -> FaultPlan:
    """Parse an ``AUTOTUNE_SIM_FAULT`` value.

    Args:
        spec: Comma-separated faults, e.g. ``"slow_start:30,hang_mid_stream:50"``. None or empty
            means no fault.

    Returns:
        The fault plan.

    Raises:
        ValueError: an unknown fault, a missing or bad value, or a value given to a flag.
    """
    kwargs: dict[str, object] = {}
    allowed = ", ".join([*_FLAGS, *(f"{n}:<int>" for n in _INTS), *(f"{n}:<seconds>" for n in _FLOATS)])
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, raw = item.partition(":")
        name = name.strip()
        raw = raw.strip()
        if name in _FLAGS:
            if sep:
                raise ValueError(f"{FAULT_ENV}: fault {name!r} takes no value, got {item!r}")
            kwargs[name] = True
        elif name in _INTS or name in _FLOATS:
            if not raw:
                raise ValueError(f"{FAULT_ENV}: fault {name!r} needs a value, e.g. {name}:3")
            try:
                value: float | int = int(raw) if name in _INTS else float(raw)
            except ValueError:
                kind = "an integer" if name in _INTS else "a number of seconds"
                raise ValueError(f"{FAULT_ENV}: {name} must be {kind}, got {raw!r}") from None
            if value < 0:
                raise ValueError(f"{FAULT_ENV}: {name} must be >= 0, got {raw!r}")
            kwargs[name] = value
        else:
            raise ValueError(f"{FAULT_ENV}: unknown fault {name!r}; known: {allowed}")
    return FaultPlan(**kwargs)  # type: ignore[arg-type]


def crash(exc_line: str, *, where: str = "event_loop_overlap", code: int = 1,
          before_exit: Callable[[], None] | None = None) -> NoReturn:
    """Log a scheduler-style traceback and end the process at once, like a dying SGLang scheduler.

    Args:
        exc_line: The last traceback line, ``ExceptionType: message``.
        where: The scheduler function shown in the fake traceback.
        code: The exit code.
        before_exit: Called just before exiting (records GPU usage); its errors are ignored.
    """
    frames = _FRAMES.get(where, _FRAMES["event_loop_overlap"])
    stack = "".join(f'  File "sglang/srt/{f}", line {n}, in {fn}\n    {code}\n' for f, n, fn, code in frames)
    logger.error("Scheduler hit an exception: Traceback (most recent call last):\n%s%s", stack, exc_line,
                 extra={"rank": " TP0"})
    logger.error("Received sigquit from a child process. It usually means the child failed.")
    if before_exit is not None:
        try:
            before_exit()
        except Exception:  # noqa: BLE001, S110 - the process is going down anyway
            pass
    for handler in logging.getLogger().handlers + logger.handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream must not stop the exit
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
