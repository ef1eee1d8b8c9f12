"""Run one inference server (SGLang or the emulator) as a subprocess that cannot outlive its owner.

`ServerProcess` starts the command in its own process group on a reserved free port, sends its
stdout and stderr to a log file, waits for an HTTP health check, and tells a crash at start-up
apart from a server that never got ready and from one that died later. On every way out (normal
exit, exception, KeyboardInterrupt, garbage collection, interpreter exit, and SIGKILL of the owner
through the `autotune.server._reaper` watchdog) it stops the whole group, grandchildren included.

Ports are reserved with ``flock`` on one lock file per port in a shared directory, so two servers
started at the same time, by threads of one process or by different processes, never get the same
port. A server that still loses the race for its port (a foreign process bound it in between) is
restarted on another port.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Self

import httpx

from autotune.server._reaper import RELEASE, group_alive, group_members, kill_group, pid_alive
from autotune.errors import ServerCrashed, ServerError, ServerStartupCrash, ServerStartupTimeout

__all__ = [
    "PortReservation",
    "ServerProcess",
    "group_alive",
    "group_members",
    "kill_group",
    "pid_alive",
    "port_in_use",
    "reserve_port",
]

PORT_PLACEHOLDER = "{port}"
LOG_TAIL_LINES = 50
_REAPER_FILE = Path(__file__).with_name("_reaper.py")
# What a server prints when its port was taken between our check and its bind (SGLang, uvicorn and
# Python's socketserver all produce one of these).
_BIND_FAILURE = re.compile(r"address already in use|port is already in use|errno 98\b|eaddrinuse",
                           re.IGNORECASE)
_LOWEST_PORT = 20000  # below this live many well-known service ports


# --------------------------------------------------------------------------------------------------
# Ports


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could not bind ``host:port`` right now.

    Binds with SO_REUSEADDR, as servers do, so connections lingering in TIME_WAIT do not count as
    "in use"; a listening socket on the port (on ``host`` or on the wildcard address) does.
    """
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def _lock_dir() -> Path:
    """Shared directory of per-port lock files; every user of this machine sees the same one."""
    override = os.environ.get("AUTOTUNE_PORT_LOCK_DIR")
    # Not tempfile.gettempdir(): processes with different TMPDIRs (Ray workers, pytest) must still
    # see each other's reservations.
    base = Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())
    path = Path(override) if override else base / "autotune-ports"
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        if not override:
            try:
                path.chmod(0o1777)  # shared like /tmp itself, so other users' servers see our locks
            except OSError:
                pass
    return path


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux default


def _candidate_port(rng: random.Random) -> int:
    """A random port outside the kernel's ephemeral range.

    Outgoing connections (our own health checks and benchmark clients among them) take their local
    port from the ephemeral range, so a listening port chosen there can be stolen by any client.
    """
    low, high = _ephemeral_range()
    spans = [(a, b) for a, b in ((_LOWEST_PORT, low - 1), (high + 1, 65535)) if b - a >= 100]
    if not spans:
        with socket.socket() as sock:  # the ephemeral range covers everything: let the kernel pick
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    a, b = rng.choice(spans)
    return rng.randint(a, b)


class PortReservation:
    """An exclusive claim on one TCP port among all autotune processes of this machine.

    The claim is an ``flock`` on ``<lock dir>/<port>.lock``; the kernel drops it when the holder
    exits, even by SIGKILL, so a crash never leaves a stale reservation behind.
    """

    def __init__(self, port: int, fd: int) -> None:
        self.port = port
        self._fd: int | None = fd

    @classmethod
    def try_acquire(cls, port: int) -> PortReservation | None:
        """Claim ``port`` if no other autotune server holds it; None if one does."""
        path = _lock_dir() / f"{port}.lock"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except PermissionError:
            return None  # a file we may not open belongs to someone else: treat as taken
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return cls(port, fd)

    @property
    def held(self) -> bool:
        """Whether this reservation still holds its lock."""
        return self._fd is not None

    def release(self) -> None:
        """Give the port back; safe to call more than once."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file drops the flock

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"PortReservation(port={self.port}, held={self.held})"


def reserve_port(host: str = "127.0.0.1", port: int | None = None, *,
                 max_tries: int = 500) -> PortReservation:
    """Reserve a free port on ``host``, or the given ``port``.

    Args:
        host: Address the server will bind.
        port: A specific port to reserve; None picks a free one.
        max_tries: How many random candidates to try before giving up.

    Returns:
        The reservation; release it once the server that used the port is dead.

    Raises:
        ServerError: ``port`` is reserved by another autotune server or bound by some process, or
            no free port was found.
    """
    if port is not None:
        if not 0 < port < 65536:
            raise ValueError(f"port must be in 1..65535, got {port}")
        reservation = PortReservation.try_acquire(port)
        if reservation is None:
            raise ServerError(f"port {port} is reserved by another autotune server on this machine; "
                              "pass port=None to pick a free one")
        if port_in_use(port, host):
            reservation.release()
            raise ServerError(f"port {port} on {host} is already in use by another process; "
                              "pass port=None to pick a free one")
        return reservation
    rng = random.Random()  # own instance: callers' random.seed() must not make servers collide
    for _ in range(max_tries):
        candidate = _candidate_port(rng)
        reservation = PortReservation.try_acquire(candidate)
        if reservation is None:
            continue
        if not port_in_use(candidate, host):
            return reservation
        reservation.release()
    raise ServerError(f"no free port found on {host} after {max_tries} tries")


# --------------------------------------------------------------------------------------------------
# Safety net at interpreter exit

_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        try:
            server.stop()
        except Exception:  # noqa: BLE001, S110 - the interpreter is exiting; stop the others regardless
            pass


atexit.register(_stop_all_at_exit)


# --------------------------------------------------------------------------------------------------
# The server


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "with an unknown status"
    if returncode < 0:
        try:
            return f"on signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"on signal {-returncode}"
    return f"with code {returncode}"


def _read_tail(path: Path, n: int, *, start: int = 0, max_line_chars: int = 2000) -> str:
    """Last ``n`` lines of ``path``, reading only from byte offset ``start``.

    Lines longer than ``max_line_chars`` are shortened (SGLang logs all its server arguments on one
    line of some 15 000 characters).
    """
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            chunk = max(65536, n * 512)
            begin = max(start, size - chunk)
            f.seek(begin)
            data = f.read()
    except FileNotFoundError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if begin > start and lines:
        lines = lines[1:]  # the first line was cut by the chunk boundary
    lines = [line if len(line) <= max_line_chars
             else f"{line[:max_line_chars]}... [{len(line) - max_line_chars} more characters]"
             for line in lines[-n:]] if n > 0 else []
    return "\n".join(lines)


def _with_tail(message: str, log_path: Path, tail: str) -> str:
    if not tail:
        return f"{message}\n(the server log {log_path} is empty)"
    return f"{message}\n--- last lines of {log_path} ---\n{tail}"


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
    """

    def __init__(self, argv: list[str] | Callable[[int], list[str]], *,
                 env: Mapping[str, str] | None = None, host: str = "127.0.0.1",
                 port: int | None = None, ready_path: str = "/health",
                 startup_timeout_s: float = 600.0, log_path: Path | str | None = None,
                 grace_s: float = 10.0, poll_interval_s: float = 0.2, health_timeout_s: float = 5.0,
                 inherit_env: bool = True, cwd: Path | str | None = None, port_retries: int = 3,
                 watchdog: bool = True) -> None:
        if callable(argv):
            self._argv_template: list[str] | Callable[[int], list[str]] = argv
        else:
            argv = list(argv)
            if not argv or not all(isinstance(a, str) for a in argv):
                raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")
            if port is None and not any(PORT_PLACEHOLDER in a for a in argv):
                raise ValueError("argv is a fixed list without a '{port}' placeholder, so the server "
                                 "cannot be told which port to use: add '--port', '{port}', pass a "
                                 "function of the port, or pass port=")
            self._argv_template = argv
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
        self._env = env
        self._host = host
        self._requested_port = port
        self._ready_path = ready_path
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
        self._attempt_offset = 0
        self._attempts = 0
        self._returncode: int | None = None
        self._last_port: int | None = None
        self._started = False
        self._stopped = False
        self._crashed = False

    # ---- properties -------------------------------------------------------------------------

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

    # ---- lifecycle --------------------------------------------------------------------------

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
            with _LIVE_LOCK:
                _LIVE.add(self)
            try:
                launches = 1 + (self._port_retries if self._requested_port is None else 0)
                while True:
                    self._reservation = reserve_port(self._host, self._requested_port)
                    self._last_port = self._reservation.port
                    self._launch()
                    try:
                        self._wait_ready()
                        return self
                    except ServerStartupCrash as crash:
                        lost_race = _BIND_FAILURE.search(self._attempt_tail(LOG_TAIL_LINES))
                        if not lost_race or self._attempts >= launches:
                            raise
                        self._log_note(f"port {self._last_port} was taken before the server bound it "
                                       f"(exit {crash.returncode}); relaunching on another port")
            except BaseException:
                self.stop()
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
            self._stop_current()
            self._stopped = True
            with _LIVE_LOCK:
                _LIVE.discard(self)
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

    # ---- health -----------------------------------------------------------------------------

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
            _with_tail(f"server pid {self.pid} on {self.url} exited {_describe_exit(status)} after it "
                       "became ready", self._log_path, tail),
            log_tail=tail, returncode=status)

    check = ensure_alive

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        """The last ``n`` lines of the server log."""
        if self._log_path is None:
            return ""
        return _read_tail(self._log_path, n)

    # ---- internals --------------------------------------------------------------------------

    def _render_argv(self, port: int) -> list[str]:
        if callable(self._argv_template):
            argv = self._argv_template(port)
            if not argv or not all(isinstance(a, str) for a in argv):
                raise ValueError(f"the argv function returned {argv!r}, not a non-empty list of strings")
            return list(argv)
        return [a.replace(PORT_PLACEHOLDER, str(port)) for a in self._argv_template]

    def _log_note(self, text: str) -> None:
        assert self._log_path is not None
        with open(self._log_path, "a", encoding="utf-8") as f:
            f.write(f"[autotune] {text}\n")

    def _attempt_tail(self, n: int) -> str:
        assert self._log_path is not None
        return _read_tail(self._log_path, n, start=self._attempt_offset)

    def _launch(self) -> None:
        assert self._reservation is not None and self._log_path is not None
        port = self._reservation.port
        argv = self._render_argv(port)
        env = dict(os.environ) if self._inherit_env else {}
        env.update(self._env)
        self._command = argv
        self._attempts += 1
        self._returncode = None
        self._log_note(f"launch {self._attempts} on port {port}: {shlex.join(argv)}")
        with open(self._log_path, "ab") as log:
            self._attempt_offset = log.tell()
            try:
                self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, env=env, cwd=self._cwd,
                                              start_new_session=True, close_fds=True)
            except OSError as exc:
                self._proc = None
                raise ServerStartupCrash(f"could not run {shlex.join(argv)}: {exc}") from exc
            if self._watchdog:
                try:
                    self._reaper = subprocess.Popen(
                        [sys.executable, "-I", str(_REAPER_FILE), str(os.getpid()), str(self._proc.pid),
                         "--grace", str(self._grace_s)],
                        stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                        start_new_session=True, close_fds=True)
                except OSError as exc:
                    raise ServerError(f"could not start the watchdog {_REAPER_FILE}: {exc}") from exc

    def _exit_status(self) -> int | None:
        """The leader's exit status if it has exited, without reaping it.

        Leaving the dead leader unreaped keeps its pid, and so the group id, from being reused by
        an unrelated process until the rest of the group is dead and we reap it ourselves.
        """
        proc = self._proc
        if proc is None:
            return self._returncode
        if proc.returncode is not None:
            return proc.returncode
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return proc.poll()
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def _wait_ready(self) -> None:
        assert self._proc is not None
        url = self.url + self._ready_path
        deadline = time.monotonic() + self._startup_timeout_s
        last = "no answer yet"
        with httpx.Client(trust_env=False) as client:  # trust_env: never send 127.0.0.1 to a proxy
            while True:
                status = self._exit_status()
                if status is not None:
                    self._raise_startup_crash(status, url)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._raise_startup_timeout(url, last)
                try:
                    response = client.get(url, timeout=httpx.Timeout(min(self._health_timeout_s,
                                                                          remaining)))
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                else:
                    if response.status_code == 200:
                        status = self._exit_status()
                        if status is not None:  # something else answered on our port
                            self._raise_startup_crash(status, url)
                        return
                    last = f"HTTP {response.status_code}"
                if self._stop_requested.wait(max(0.0, min(self._poll_interval_s,
                                                          deadline - time.monotonic()))):
                    raise ServerError(f"start-up of server pid {self.pid} was cancelled by stop()")

    def _raise_startup_crash(self, status: int, url: str) -> None:
        tail = self._attempt_tail(LOG_TAIL_LINES)
        pid = self.pid
        self._stop_current()
        raise ServerStartupCrash(
            _with_tail(f"server pid {pid} exited {_describe_exit(status)} before {url} answered 200; "
                       f"command: {shlex.join(self._command or [])}", self._log_path, tail),
            log_tail=tail, returncode=status)

    def _raise_startup_timeout(self, url: str, last: str) -> None:
        pid = self.pid
        self._stop_current()
        tail = self._attempt_tail(LOG_TAIL_LINES)
        raise ServerStartupTimeout(
            _with_tail(f"server pid {pid} was alive but {url} did not answer 200 within "
                       f"{self._startup_timeout_s:g} s (last answer: {last}); it was stopped "
                       f"{_describe_exit(self._returncode)}; command: {shlex.join(self._command or [])}",
                       self._log_path, tail),
            log_tail=tail)

    def _stop_current(self) -> None:
        """Kill the current launch's group, reap it, then let go of the watchdog and the port."""
        proc = self._proc
        interrupted: BaseException | None = None
        gone = True
        if proc is not None and proc.returncode is None:
            try:
                gone = kill_group(proc.pid, grace_s=self._grace_s)
            except BaseException as exc:  # noqa: BLE001 - Ctrl-C in the grace period: SIGKILL now
                interrupted = exc
                gone = kill_group(proc.pid, grace_s=0.0)
            gone = self._reap(proc) and gone
        if proc is not None:
            self._returncode = proc.returncode
        if not gone:
            assert proc is not None
            raise ServerError(f"processes {group_members(proc.pid) or [proc.pid]} of group {proc.pid} "
                              "survived SIGKILL; the watchdog will try again when this process exits")
        self._release_reaper()
        if self._reservation is not None:
            self._last_port = self._reservation.port
            self._reservation.release()
            self._reservation = None
        if interrupted is not None:
            raise interrupted

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes]) -> bool:
        try:
            proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _release_reaper(self) -> None:
        reaper, self._reaper = self._reaper, None
        if reaper is None:
            return
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
