"""Run one inference server (SGLang or the emulator) as a subprocess that cannot outlive its owner.

`ServerProcess` starts the command in its own process group on a reserved free port
(:mod:`autotune.server.ports`), sends its stdout and stderr to a log file, waits for an HTTP
health check (:mod:`autotune.server.ready`), and tells a crash at start-up apart from a server that
never got ready and from one that died later. On every way out (normal exit, exception,
KeyboardInterrupt, garbage collection, interpreter exit, and SIGKILL of the owner through the
`autotune.server._reaper` watchdog) it stops the whole group, grandchildren included
(:mod:`autotune.server.group`). A server that still loses the race for its port (a foreign process
bound it in between) is restarted on another port.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self

from autotune.errors import ServerCrashed, ServerError, ServerStartupCrash
from autotune.server._reaper import group_members
from autotune.server.group import (
    argv_template,
    exit_status,
    forget_at_exit,
    release_watchdog,
    render_argv,
    spawn,
    start_watchdog,
    stop_at_exit,
    stop_group,
)
from autotune.server.lifetime import Lifetime
from autotune.server.logs import LOG_TAIL_LINES, describe_exit, read_tail, startup_crash, startup_timeout, with_tail
from autotune.server.ports import BIND_FAILURE, PortReservation, reserve_port
from autotune.server.ready import poll_ready
from autotune.server.standby import Standby

__all__ = ["ServerProcess"]

class ServerProcess:
    """A server subprocess in its own process group, stopped as a group on every exit path.

    Example::

        argv = lambda port: [sys.executable, "-m", "autotune.sim.server", "--port", str(port)]
        with ServerProcess(argv, startup_timeout_s=120) as server:
            httpx.get(server.url + "/v1/models")
            server.ensure_alive()

    Args:
        argv: The command line, or a function from the chosen port to the command line. A list may
            contain the placeholder ``{port}`` inside its items (``"--port", "{port}"``); a list
            without it needs an explicit ``port``.
        env: Environment variables to set for the server.
        host: Address the server binds and that health checks use.
        port: A fixed port; None reserves a free one.
        ready_path: HTTP path that answers 200 once the server is ready. SGLang's ``/health``
            answers 503 while it loads, ``/health_generate`` generates a token.
        startup_timeout_s: Seconds from launch until ready before `ServerStartupTimeout`.
        log_path: File for the server's stdout and stderr (appended). None creates a temporary
            file that is kept for the caller.
        grace_s: Seconds between SIGTERM and SIGKILL when stopping.
        poll_interval_s: Seconds between health checks.
        health_timeout_s: Per-request timeout of one health check.
        inherit_env: Start from this process's environment (True) or from ``env`` alone.
        cwd: Working directory of the server.
        port_retries: Extra launches on a new port when an auto-picked port was lost to a race.
        watchdog: Start the `autotune.server._reaper` sidecar that stops the group if this process is
            killed. Turn off only in tests of the other safety nets.
        standby: A :class:`~autotune.server.standby.Standby` for the first launch where it can run it.
    """

    def __init__(self, argv: list[str] | Callable[[int], list[str]], *,
                 env: Mapping[str, str] | None = None, host: str = "127.0.0.1",
                 port: int | None = None, ready_path: str = "/health",
                 startup_timeout_s: float = 600.0, log_path: Path | str | None = None,
                 grace_s: float = 10.0, poll_interval_s: float = 0.2, health_timeout_s: float = 5.0,
                 inherit_env: bool = True, cwd: Path | str | None = None, port_retries: int = 3,
                 watchdog: bool = True, standby: Standby | None = None) -> None:
        self._argv_template = argv_template(argv, port=port)
        env = dict(env or {})
        bad = {k: v for k, v in env.items() if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise ValueError(f"environment names and values must be strings, got {bad!r}")
        if not ready_path.startswith("/"):
            raise ValueError(f"ready_path must start with '/', got {ready_path!r}")
        for name, value in (("startup_timeout_s", startup_timeout_s), ("poll_interval_s", poll_interval_s),
                            ("health_timeout_s", health_timeout_s)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s}")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port must be in 1..65535, got {port}")
        if port_retries < 0:
            raise ValueError(f"port_retries must be >= 0, got {port_retries}")
        self._env, self._host, self._requested_port, self._ready_path = env, host, port, ready_path
        self._startup_timeout_s = float(startup_timeout_s)
        self._log_path: Path | None = Path(log_path) if log_path is not None else None
        self._grace_s = float(grace_s)
        self._poll_interval_s = float(poll_interval_s)
        self._health_timeout_s = float(health_timeout_s)
        self._inherit_env = inherit_env
        self._cwd = cwd
        self._port_retries = port_retries
        self._watchdog = watchdog

        self._lock = threading.RLock()
        self._stop_requested = threading.Event()
        self._owner_pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._reservation: PortReservation | None = None
        self._command: list[str] | None = None
        self._attempt_offset = self._attempts = 0
        self._returncode: int | None = None
        self._last_port: int | None = None
        self._started = self._stopped = self._crashed = False
        self.lifetime = Lifetime()  # start-up and teardown seconds, for the GPU bill
        self._standby = standby
        #: How the first launch went with a standby (:mod:`autotune.server.standby`); None without one.
        self.standby_note: dict[str, Any] | None = None

    @property
    def host(self) -> str:
        """Address the server binds."""
        return self._host

    @property
    def port(self) -> int | None:
        """The port in use, once started."""
        return self._reservation.port if self._reservation is not None else self._last_port

    @property
    def url(self) -> str:
        """Base URL of the server, without a trailing slash."""
        if self.port is None:
            raise RuntimeError("the server has no port before start()")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Pid of the server process (the group leader), once started."""
        return self._proc.pid if self._proc is not None else None

    @property
    def pgid(self) -> int | None:
        """Process group id of the server; equal to its pid, since it leads a new session."""
        return self.pid

    @property
    def reaper_pid(self) -> int | None:
        """Pid of the watchdog sidecar, while it runs."""
        return self._reaper.pid if self._reaper is not None else None

    @property
    def log_path(self) -> Path | None:
        """The log file; set at start() when it was not given."""
        return self._log_path

    @property
    def command(self) -> list[str] | None:
        """The exact command line of the last launch."""
        return list(self._command) if self._command is not None else None

    @property
    def attempts(self) -> int:
        """How many times the server was launched (more than 1 after a lost port race)."""
        return self._attempts

    @property
    def returncode(self) -> int | None:
        """Exit status once stopped or crashed: negative for a signal, as in `subprocess`."""
        return self._returncode

    def __repr__(self) -> str:
        state = ("running" if self.alive() else f"exited {self._returncode}") if self._proc else "not started"
        return f"ServerProcess(pid={self.pid}, port={self.port}, {state}, log={self._log_path})"

    def start(self) -> ServerProcess:
        """Launch the server and wait until it is ready.

        Returns:
            self, ready to serve.

        Raises:
            ServerStartupCrash: The process exited before it was ready (exit code, log tail).
            ServerStartupTimeout: It stayed alive but not ready for ``startup_timeout_s``; it was
                stopped before this was raised.
            ServerError: The requested port is taken, the watchdog could not start, or `stop`
                was called from another thread meanwhile.
        """
        with self._lock:
            if self._started or self._stop_requested.is_set():
                raise RuntimeError("a ServerProcess runs once; create a new one to start again")
            self._started = True
            self._owner_pid = os.getpid()
            if self._log_path is None:
                fd, name = tempfile.mkstemp(prefix="autotune-server-", suffix=".log")
                os.close(fd)
                self._log_path = Path(name)
            else:
                self._log_path.parent.mkdir(parents=True, exist_ok=True)
            stop_at_exit(self)
            self.lifetime.began()
            try:
                launches = 1 + (self._port_retries if self._requested_port is None else 0)
                while True:
                    self._reservation = reserve_port(self._host, self._requested_port)
                    self._last_port = self._reservation.port
                    self._launch()
                    try:
                        self._wait_ready()
                        self.lifetime.started()
                        return self
                    except ServerStartupCrash as crash:
                        lost_race = BIND_FAILURE.search(self._attempt_tail(LOG_TAIL_LINES))
                        if not lost_race or self._attempts >= launches:
                            raise
                        self._log_note(f"port {self._last_port} was taken before the server bound it "
                                       f"(exit {crash.returncode}); relaunching on another port")
            except BaseException:
                self.stop()
                self.lifetime.started()
                raise

    def stop(self) -> int | None:
        """Stop the whole process group (SIGTERM, ``grace_s``, SIGKILL) and reap the server.

        Safe to call more than once and from any thread; called while another thread is in
        `start`, it makes that start raise `ServerError`. A KeyboardInterrupt during the grace
        period skips straight to SIGKILL, then propagates.

        Returns:
            The server's exit status (negative for a signal), or None if it never started.

        Raises:
            ServerError: Some process of the group survived SIGKILL (stuck in the kernel). The
                watchdog stays in place so it tries again when this process exits.
        """
        if self._owner_pid is not None and os.getpid() != self._owner_pid:
            return None  # a forked copy of the owner: the server is not ours to stop
        self._stop_requested.set()  # a start() in another thread gives up the lock at its next poll
        with self._lock:
            standby, self._standby = self._standby, None
            if standby is not None:  # given but never launched
                standby.discard()
            self._stop_current()
            self._stopped = True
            forget_at_exit(self)
            return self._returncode

    def __enter__(self) -> Self:
        if not self._started:
            self.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            if self._proc is not None and not self._stopped:
                self.stop()
        except Exception:  # noqa: BLE001, S110 - nothing can be raised from a finalizer
            pass

    def alive(self) -> bool:
        """Whether the server process is running (without reaping it)."""
        return self._proc is not None and self._exit_status() is None

    def ensure_alive(self) -> None:
        """Raise if the server is no longer running.

        Raises:
            ServerCrashed: The server exited on its own; its group has now been stopped. Carries
                the exit status and the log tail.
            ServerError: The server was never started, or was stopped by `stop`.
        """
        if self._proc is None:
            raise ServerError("the server was never started")
        if self._stopped and not self._crashed:
            raise ServerError(f"the server was stopped (exit {self._returncode})",
                              returncode=self._returncode)
        if self._exit_status() is None:
            return
        self._crashed = True
        status = self.stop()
        tail = self.log_tail(LOG_TAIL_LINES)
        raise ServerCrashed(
            with_tail(f"server pid {self.pid} on {self.url} exited {describe_exit(status)} after it "
                       "became ready", self._log_path, tail),
            log_tail=tail, returncode=status)

    check = ensure_alive

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        """The last ``n`` lines of the server log."""
        if self._log_path is None:
            return ""
        return read_tail(self._log_path, n)

    def _log_note(self, text: str) -> None:
        assert self._log_path is not None
        with open(self._log_path, "a", encoding="utf-8") as f:
            f.write(f"[autotune] {text}\n")

    def _attempt_tail(self, n: int) -> str:
        assert self._log_path is not None
        return read_tail(self._log_path, n, start=self._attempt_offset)

    def _launch(self) -> None:
        assert self._reservation is not None and self._log_path is not None
        port = self._reservation.port
        argv = render_argv(self._argv_template, port)
        env = dict(os.environ) if self._inherit_env else {}
        env.update(self._env)
        self._command = argv
        self._attempts += 1
        self._returncode = None
        self._log_note(f"launch {self._attempts} on port {port}: {shlex.join(argv)}")
        with open(self._log_path, "ab") as log:
            self._attempt_offset = log.tell()
            if self._standby is not None:  # the first launch only
                standby, self._standby = self._standby, None
                proc, self.standby_note = standby.launch(argv, env=env, cwd=self._cwd, log_path=self._log_path)
                self._log_note(self.standby_note["line"])
                if proc is not None:
                    self._proc, self._reaper = proc, standby.take_watchdog()
                    return
            try:
                self._proc = spawn(argv, log=log, env=env, cwd=self._cwd)
            except ServerStartupCrash:
                self._proc = None
                raise
            if self._watchdog:
                self._reaper = start_watchdog(self._proc.pid, grace_s=self._grace_s, log=log)

    def _exit_status(self) -> int | None:
        """The leader's exit status if it has exited, without reaping it (see `exit_status`)."""
        if self._proc is None:
            return self._returncode
        return exit_status(self._proc)

    def _wait_ready(self) -> None:
        assert self._proc is not None
        url = self.url + self._ready_path
        outcome = poll_ready(url, exit_status=self._exit_status, timeout_s=self._startup_timeout_s,
                             health_timeout_s=self._health_timeout_s,
                             poll_interval_s=self._poll_interval_s, cancel=self._stop_requested)
        if outcome.kind == "exited":
            assert outcome.status is not None
            self._raise_startup_crash(outcome.status, url)
        if outcome.kind == "timeout":
            self._raise_startup_timeout(url, outcome.last)
        if outcome.kind == "cancelled":
            raise ServerError(f"start-up of server pid {self.pid} was cancelled by stop()")

    def _raise_startup_crash(self, status: int, url: str) -> None:
        tail, pid = self._attempt_tail(LOG_TAIL_LINES), self.pid
        self._stop_current()
        raise startup_crash(pid=pid, status=status, url=url, command=self._command, log_path=self._log_path,
                            tail=tail)

    def _raise_startup_timeout(self, url: str, last: str) -> None:
        pid = self.pid
        self._stop_current()
        raise startup_timeout(pid=pid, url=url, timeout_s=self._startup_timeout_s, last=last,
                              returncode=self._returncode, command=self._command, log_path=self._log_path,
                              tail=self._attempt_tail(LOG_TAIL_LINES))

    def _stop_current(self) -> None:
        """Kill the current launch's group, reap it, then let go of the watchdog and the port."""
        proc = self._proc
        interrupted: BaseException | None = None
        gone = True
        if proc is not None and proc.returncode is None:
            with self.lifetime.stopping():
                gone, interrupted = stop_group(proc, grace_s=self._grace_s)
        if proc is not None:
            self._returncode = proc.returncode
        if not gone:
            assert proc is not None
            raise ServerError(f"processes {group_members(proc.pid) or [proc.pid]} of group {proc.pid} "
                              "survived SIGKILL; the watchdog will try again when this process exits")
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            release_watchdog(reaper)
        if self._reservation is not None:
            self._last_port = self._reservation.port
            self._reservation.release()
            self._reservation = None
        if interrupted is not None:
            raise interrupted
