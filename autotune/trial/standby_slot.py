"""The trial process's one standby launcher (``measure.standby``): started while a server starts up,
handed the next server this process launches.

A Ray trial process measures one server after another (a group's baseline, the trial, the next
trial when Ray reuses the process), so while server N starts up, :func:`prepare` starts a
:class:`~autotune.server.standby.Standby` in N's environment, and server N+1 is launched by it
where :meth:`~autotune.server.standby.Standby.why_not` allows. :func:`check_ready` waits a bounded
time for it once N is ready and ends one that is still importing then, so that no standby works
while anything is measured, and
:func:`cpu_s` lets the caller show that the one kept did not: its CPU seconds before and after the
measurement go into the trial's result (``standby``).
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from autotune.backend import get_backend
from autotune.errors import ServerError
from autotune.server.standby import Standby
from autotune.trial.level_measure import PHASES

__all__ = ["check_ready", "cpu_s", "discard", "prepare", "take"]

_held: Standby | None = None


def take() -> Standby | None:
    """The standby held for this process's next server (None if there is none); it is the
    caller's from here."""
    global _held
    held, _held = _held, None
    return held


def prepare(*, argv: Sequence[str], backend: str, env: Mapping[str, str], workdir: Path, grace_s: float,
            prefork: bool = False) -> None:
    """Start a standby for the next server, expected to run as ``argv``'s program in ``env`` (the
    server about to start's), ending any held one; with ``prefork``, it also starts a fork server
    with the backend's :attr:`~autotune.backend.Backend.prefork` modules imported."""
    global _held
    discard()
    b = get_backend(backend)
    if not b.preimport or list(argv[1:3]) != ["-m", b.module]:
        return
    log = workdir / f"standby-{os.getpid()}-{int(time.time() * 1000)}.log"
    try:
        _held = Standby(python=argv[0], module=b.module, preimport=b.preimport, env=env, cwd=os.getcwd(),
                        late_env=b.late_env, log_path=log, grace_s=grace_s,
                        prefork=b.prefork if prefork else (), prefork_scans=b.prefork_scans,
                        prefork_rebind=b.prefork_rebind,
                        main_block=b.main_block, plugin_groups=b.plugin_groups)
    except (OSError, ServerError) as exc:  # a standby is an optimisation: the next launch is a fresh one
        PHASES.warning("no standby for the next server: %s", exc)


#: How long a standby whose fork server is dropped may take to say it is ready: it kills one process.
_DROP_S = 5.0


def check_ready(*, wait: bool = True) -> tuple[str | None, float]:
    """Before a measurement: wait for the held standby to be ready, with ``wait`` up to as long as it
    has been importing (the server idle meanwhile: a fresh launch of the next server would redo at
    least that much, so the wait never costs more than losing the standby would); then end it if it
    is still importing (it would work while the measurement runs), or only its fork server where the
    standby's own imports are done (the next server is then launched by the standby, its children
    spawned). Returns why the standby was ended (None if it is ready, with or without its fork
    server, or there is none) and the seconds waited."""
    if _held is None:
        return None, 0.0
    t0 = time.monotonic()
    bound = max(t0 - _held.started_at, 0.0) if wait else 0.0
    if _held.ready(timeout_s=bound):
        return None, round(time.monotonic() - t0, 3)
    if _held.drop_prefork("its imports were not done when the server it started beside was ready",
                          timeout_s=_DROP_S):
        return None, round(time.monotonic() - t0, 3)
    why = "still importing when the server it started beside was ready" if _held.proc.poll() is None else (
        f"it exited ({_held.proc.returncode}; its log: {_held.log_path})")
    discard()
    return why, round(time.monotonic() - t0, 3)


def cpu_s() -> float | None:
    """The held standby's CPU seconds so far; None without one."""
    return _held.cpu_s() if _held is not None else None


def discard() -> None:
    """End the held standby, if any."""
    global _held
    held, _held = _held, None
    if held is not None:
        held.discard()


atexit.register(discard)
