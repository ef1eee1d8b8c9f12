"""Finding what a search left behind, by pid: processes, ports and GPU locks.

Every process a reliability test starts (the CLI, an embedded Ray, a local cluster's raylets, their
workers and every server they launch) inherits one environment variable, ``TOKEN_ENV``, with a
value unique to the test. Processes are found by reading ``/proc/<pid>/environ`` for it, so the
checks see only what the test started, never other users' processes. Nothing here kills anything
it did not start; :func:`kill_pid` is for pids the test itself found through its own token.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from autotune.server._reaper import pid_alive
from autotune.server.ports import PortReservation, port_in_use

TOKEN_ENV = "AUTOTUNE_RELIABILITY_TOKEN"
SERVER_MODULE = "autotune.sim.server"
REAPER_FILE = "_reaper.py"


def new_token(label: str) -> str:
    """A token unique to one test (``label`` only makes it readable in ``ps e``)."""
    return f"{label}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class Proc:
    """A live process that carries a test's token."""

    pid: int
    ppid: int
    pgid: int
    cmdline: str

    @property
    def is_server(self) -> bool:
        return SERVER_MODULE in self.cmdline

    @property
    def is_reaper(self) -> bool:
        return REAPER_FILE in self.cmdline


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgid) from /proc, None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    return fields[0].decode(), int(fields[1]), int(fields[2])


def processes_with_token(token: str) -> list[Proc]:
    """Live (non-zombie) processes whose environment holds ``TOKEN_ENV=token``."""
    needle = f"{TOKEN_ENV}={token}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle not in env.split(b"\0"):
            continue
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append(Proc(pid=pid, ppid=stat[1], pgid=stat[2], cmdline=cmd.strip()))
    return found


def servers_with_token(token: str) -> list[Proc]:
    """The emulator servers (and their watchdogs) that carry ``token``."""
    return [p for p in processes_with_token(token) if p.is_server or p.is_reaper]


def wait_until(predicate: Callable[[], bool], *, timeout_s: float, poll_s: float = 0.1) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()


def wait_gone(pids: Iterable[int], *, timeout_s: float) -> list[int]:
    """Wait for every pid to exit; returns those still alive at the end."""
    pids = list(pids)
    wait_until(lambda: not any(pid_alive(p) for p in pids), timeout_s=timeout_s)
    return [p for p in pids if pid_alive(p)]


def kill_pid(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal one process the test found through its own token (never by name)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


_LAUNCH = re.compile(r"^\[autotune\] launch \d+ on port (\d+):", re.MULTILINE)


def ports_from_logs(log_dir: Path) -> set[int]:
    """Every port a ``ServerProcess`` launched a server on, from its log notes under ``log_dir``."""
    ports: set[int] = set()
    for path in log_dir.rglob("*.log"):
        ports.update(int(m) for m in _LAUNCH.findall(path.read_text(errors="replace")))
    return ports


def held_ports(ports: Iterable[int]) -> list[int]:
    """Ports still bound on 127.0.0.1 or still reserved by an autotune process."""
    held = []
    for port in sorted(set(ports)):
        if port_in_use(port):
            held.append(port)
            continue
        reservation = PortReservation.try_acquire(port)
        if reservation is None:
            held.append(port)
        else:
            reservation.release()
    return held


def held_gpu_locks(lock_dirs: Iterable[Path]) -> list[str]:
    """``<dir>/gpu<id>.lock`` files some process still holds an ``flock`` on."""
    held = []
    for d in lock_dirs:
        for path in sorted(Path(d).glob("gpu*.lock")):
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(str(path))
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
    return held


@dataclass
class Leftovers:
    """What a search left behind; everything empty means clean."""

    servers: list[Proc]
    ports: list[int]
    gpu_locks: list[str]

    @property
    def count(self) -> int:
        return len(self.servers) + len(self.ports) + len(self.gpu_locks)

    def describe(self) -> str:
        return (f"servers/watchdogs {[(p.pid, p.cmdline[:80]) for p in self.servers]}, "
                f"ports {self.ports}, GPU locks {self.gpu_locks}")


def leftovers(token: str, *, log_dir: Path, lock_dirs: Iterable[Path], timeout_s: float = 20.0) -> Leftovers:
    """Servers, watchdogs, ports and GPU locks still held after a search (waits up to
    ``timeout_s`` for processes already going down)."""
    lock_dirs = list(lock_dirs)
    wait_until(lambda: not servers_with_token(token), timeout_s=timeout_s, poll_s=0.2)
    return Leftovers(servers=servers_with_token(token), ports=held_ports(ports_from_logs(log_dir)),
                     gpu_locks=held_gpu_locks(lock_dirs))
