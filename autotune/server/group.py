"""A server's process group: launched in its own session, watched by a sidecar, killed whole.

Each launch renders the command for its port and runs it as the leader of a new session, so its
grandchildren share its group and die with it, and (unless turned off) starts the
:mod:`autotune.server._reaper` watchdog that kills the group if the owner is SIGKILLed. Exit
status is read without reaping the leader, which keeps the group id from being reused while
members may still live, and servers still running at interpreter exit are stopped then. These
are the lifecycle and kill paths of :class:`~autotune.server.process.ServerProcess`, kept apart
from its readiness polling, port reservation and log messages.
"""

from __future__ import annotations

import atexit
import os
import shlex
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Protocol

from autotune.errors import ServerError, ServerStartupCrash
from autotune.server._reaper import RELEASE, children_of, kill_group

__all__ = [
    "PORT_PLACEHOLDER",
    "Stoppable",
    "argv_template",
    "descendants_watched",
    "exit_status",
    "forget_at_exit",
    "release_watchdog",
    "render_argv",
    "spawn",
    "start_watchdog",
    "stop_at_exit",
    "stop_group",
    "watch_descendants",
]

PORT_PLACEHOLDER = "{port}"
_REAPER_FILE = Path(__file__).with_name("_reaper.py")


def argv_template(argv: list[str] | Callable[[int], list[str]], *,
                  port: int | None) -> list[str] | Callable[[int], list[str]]:
    """Check a server command given as a list (with ``{port}`` unless ``port`` is fixed) or as a
    function of the port; returns what `render_argv` takes."""
    if callable(argv):
        return argv
    argv = list(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")
    if port is None and not any(PORT_PLACEHOLDER in a for a in argv):
        raise ValueError("argv is a fixed list without a '{port}' placeholder, so the server "
                         "cannot be told which port to use: add '--port', '{port}', pass a "
                         "function of the port, or pass port=")
    return argv


def render_argv(template: list[str] | Callable[[int], list[str]], port: int) -> list[str]:
    """The command line of one launch on ``port``."""
    if callable(template):
        argv = template(port)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"the argv function returned {argv!r}, not a non-empty list of strings")
        return list(argv)
    return [a.replace(PORT_PLACEHOLDER, str(port)) for a in template]


class Stoppable(Protocol):
    """What the exit-time safety net needs of a server."""

    def stop(self) -> object: ...


# Safety net at interpreter exit: every started server not yet stopped is stopped then.
_LIVE: weakref.WeakSet[Stoppable] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def stop_at_exit(server: Stoppable) -> None:
    """Call ``server.stop()`` at interpreter exit unless `forget_at_exit` comes first."""
    with _LIVE_LOCK:
        _LIVE.add(server)


def forget_at_exit(server: Stoppable) -> None:
    """Undo `stop_at_exit` for a server that has been stopped."""
    with _LIVE_LOCK:
        _LIVE.discard(server)


def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        try:
            server.stop()
        except Exception:  # noqa: BLE001, S110 - the interpreter is exiting; stop the others regardless
            pass


atexit.register(_stop_all_at_exit)


def spawn(argv: list[str], *, log: IO[bytes], env: Mapping[str, str],
          cwd: Path | str | None) -> subprocess.Popen[bytes]:
    """Run ``argv`` as the leader of a new session, its stdout and stderr going to ``log``.

    Raises:
        ServerStartupCrash: The command could not be run at all.
    """
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        raise ServerStartupCrash(f"could not run {shlex.join(argv)}: {exc}") from exc


def start_watchdog(leader_pid: int, *, grace_s: float, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start the reaper sidecar that stops group ``leader_pid`` if this process dies.

    Raises:
        ServerError: The sidecar could not be started.
    """
    try:
        return subprocess.Popen(
            [sys.executable, "-I", str(_REAPER_FILE), str(os.getpid()), str(leader_pid),
             "--grace", str(grace_s)],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True)
    except OSError as exc:
        raise ServerError(f"could not start the watchdog {_REAPER_FILE}: {exc}") from exc


def watch_descendants(*, log: IO[bytes], poll_s: float = 0.5) -> subprocess.Popen[bytes]:
    """Start the watchdog that kills everything this process starts from now on (an embedded
    Ray's node processes and workers, the servers under them) should this process be killed
    before it ends them itself; :func:`release_watchdog` when it has.

    Raises:
        ServerError: The sidecar could not be started.
    """
    # Listed here, not by the sidecar once it runs: Ray's first processes may be born before it does.
    spare = ",".join(f"{pid}:{start}" for pid, start in sorted(children_of(os.getpid())))
    try:
        return subprocess.Popen(
            [sys.executable, "-I", str(_REAPER_FILE), str(os.getpid()), "--descendants", "--spare", spare,
             "--poll", str(poll_s)],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True)
    except OSError as exc:
        raise ServerError(f"could not start the watchdog {_REAPER_FILE}: {exc}") from exc


@contextmanager
def descendants_watched(log_path: Path, *, poll_s: float = 0.5) -> Iterator[None]:
    """The block runs with :func:`watch_descendants` on guard (its notes appended to ``log_path``),
    and the watchdog released when the block ends, however it ends."""
    with open(log_path, "ab") as log:
        watchdog = watch_descendants(log=log, poll_s=poll_s)
    try:
        yield
    finally:
        release_watchdog(watchdog)


def exit_status(proc: subprocess.Popen[bytes]) -> int | None:
    """The leader's exit status if it has exited, without reaping it.

    Leaving the dead leader unreaped keeps its pid, and so the group id, from being reused by
    an unrelated process until the rest of the group is dead and we reap it ourselves.
    """
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return proc.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def stop_group(proc: subprocess.Popen[bytes], *, grace_s: float) -> tuple[bool, BaseException | None]:
    """Kill the group ``proc`` leads (SIGTERM, ``grace_s``, SIGKILL) and reap ``proc``.

    Returns:
        Whether the whole group is gone and reaped, and the exception (a KeyboardInterrupt) that
        cut the grace period short, for the caller to raise once it has cleaned up.
    """
    interrupted: BaseException | None = None
    try:
        gone = kill_group(proc.pid, grace_s=grace_s)
    except BaseException as exc:  # noqa: BLE001 - Ctrl-C in the grace period: SIGKILL now
        interrupted = exc
        gone = kill_group(proc.pid, grace_s=0.0)
    return _reap(proc) and gone, interrupted


def _reap(proc: subprocess.Popen[bytes]) -> bool:
    try:
        proc.wait(timeout=10.0)
    except subprocess.TimeoutExpired:
        return False
    return True


def release_watchdog(reaper: subprocess.Popen[bytes]) -> None:
    """Tell the reaper its group is already stopped, and wait for it to exit."""
    assert reaper.stdin is not None
    try:
        reaper.stdin.write(RELEASE + b"\n")
        reaper.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    try:
        reaper.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        reaper.kill()  # our own child, by pid
        reaper.wait()


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name; None where it cannot be read."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cpu_s(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds process ``pid`` has used so far (user and system, from ``/proc``); None where
    it cannot be read (gone, or no ``/proc``)."""
    fields = _stat(pid)
    return None if fields is None else _cpu_s(fields)


def _session(sid: int) -> dict[int, list[str]] | None:
    """The stat fields of every process in session ``sid``, its leader first; None where the
    leader cannot be read."""
    leader = _stat(sid)
    if leader is None:
        return None
    found = {sid: leader}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(sid):
            fields = _stat(entry.name)  # None: gone meanwhile
            if fields is not None and fields[3] == str(sid):
                found[int(entry.name)] = fields
    return found


def session_pids(sid: int) -> list[int]:
    """The processes of session ``sid`` (a standby and the fork server it started), its leader first;
    empty where the leader is gone."""
    return list(_session(sid) or {})


def session_cpu_s(sid: int) -> float | None:
    """CPU seconds the processes of session ``sid`` have used so far, by ``/proc``; None where the
    session's leader cannot be read."""
    found = _session(sid)
    return None if found is None else sum(_cpu_s(fields) for fields in found.values())
