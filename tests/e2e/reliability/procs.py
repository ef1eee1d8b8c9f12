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
from autotune.server.ports import PortReservation, _lock_dir, port_in_use

TOKEN_ENV = "AUTOTUNE_RELIABILITY_TOKEN"

#: The one deadline of every wait for something already on its way out (a process group, a port, a
#: lock). It bounds a hang, not a speed: each wait returns as soon as its event happened, and on two
#: cores at load 6-8 Ray's processes took over a minute to notice a dead driver, so any deadline
#: short enough to assume how fast the box is fails there. Tests measure the time it took instead.
HANG_S = 240.0
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


def _parent_and_start(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks after boot) of a live, non-zombie ``pid``."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    return None if fields[0] in (b"Z", b"X") else (int(fields[1]), int(fields[19]))


def descendants(pid: int) -> dict[int, int]:
    """Every live descendant of ``pid`` now, by /proc's parent links: pid -> start time (so that a pid
    reused later is not taken for one of them).

    The token does not find them all: Ray starts its dashboard and runtime-env agents with an
    environment of its own, without the test's token.
    """
    table = {int(n): st for n in os.listdir("/proc") if n.isdigit() and (st := _parent_and_start(int(n)))}
    found: dict[int, int] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, start) in table.items():
            if ppid == parent and child not in found:
                found[child] = start
                todo.append(child)
    return found


def still_alive(snapshot: dict[int, int]) -> list[int]:
    """The pids of a :func:`descendants` snapshot that are the same processes and still alive."""
    return sorted(p for p, start in snapshot.items() if (st := _parent_and_start(p)) and st[1] == start)


def servers_with_token(token: str) -> list[Proc]:
    """The emulator servers (and their watchdogs) that carry ``token``."""
    return [p for p in processes_with_token(token) if p.is_server or p.is_reaper]


def wait_until(predicate: Callable[[], bool], *, timeout_s: float = HANG_S, poll_s: float = 0.1) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()


def wait_gone(pids: Iterable[int], *, timeout_s: float = HANG_S) -> list[int]:
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


def _socket_inodes(port: int) -> set[int]:
    """Inodes of the listening TCP sockets bound to ``port`` (any address), from /proc/net."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN.
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def _socket_holders(inodes: set[int]) -> set[int]:
    """Pids with an open descriptor on one of the socket ``inodes``."""
    wanted = {f"socket:[{i}]" for i in inodes}
    holders = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") in wanted:
                    holders.add(int(name))
                    break
            except OSError:
                continue
    return holders


def _flock_holders(path: Path) -> set[int]:
    """Pids /proc/locks names as holding a lock on the file ``path``."""
    try:
        st = path.stat()
        table = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return set()
    holders = set()
    for line in table:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:56789 0 EOF"; a blocked waiter's line has "->".
        if len(fields) < 6 or "->" in fields[1]:
            continue
        try:
            major, minor, inode = fields[5].split(":")
            pid, dev = int(fields[4]), (int(major, 16), int(minor, 16))
        except ValueError:
            continue
        if int(inode) == st.st_ino and dev == (os.major(st.st_dev), os.minor(st.st_dev)):
            holders.add(pid)
    return holders


@dataclass(frozen=True)
class HeldPort:
    """A port still bound or reserved, and who holds it (so a failure says whose it is)."""

    port: int
    how: str  # "bound" (a listening socket) or "reserved" (an autotune PortReservation's flock)
    holders: tuple[tuple[int, str], ...]  # (pid, command line) of each holder /proc could name

    def __str__(self) -> str:
        who = ", ".join(f"pid {pid} {cmd[:100]!r}" for pid, cmd in self.holders) or "holder unknown"
        return f"{self.port} {self.how} by {who}"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _carries(pid: int, token: str) -> bool:
    try:
        return f"{TOKEN_ENV}={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def held_ports(ports: Iterable[int], token: str | None = None) -> list[HeldPort]:
    """Ports still bound on 127.0.0.1 or still reserved by an autotune process.

    With ``token``, a port whose every holder /proc names is a process without the token is left
    out: ports are drawn at random from one range by every autotune process of the machine, so a
    port this test's search used and released may be another test's (or user's) server's by now.
    A port whose holder cannot be named counts as held.
    """
    held = []
    for port in sorted(set(ports)):
        if port_in_use(port):
            how, pids = "bound", _socket_holders(_socket_inodes(port))
        else:
            reservation = PortReservation.try_acquire(port)
            if reservation is not None:
                reservation.release()
                continue
            how, pids = "reserved", _flock_holders(_lock_dir() / f"{port}.lock")
        if token is not None and pids and not any(_carries(p, token) for p in pids):
            continue
        held.append(HeldPort(port, how, tuple((p, cmdline(p)) for p in sorted(pids))))
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
    ports: list[HeldPort]
    gpu_locks: list[str]
    #: Seconds :func:`leftovers` waited for the search's things to go (up to its deadline).
    waited_s: float = 0.0

    @property
    def count(self) -> int:
        return len(self.servers) + len(self.ports) + len(self.gpu_locks)

    def describe(self) -> str:
        return (f"after waiting {self.waited_s:.1f} s: servers/watchdogs "
                f"{[(p.pid, p.cmdline[:80]) for p in self.servers]}, "
                f"ports {[str(p) for p in self.ports]}, GPU locks {self.gpu_locks}")


def leftovers(token: str, *, log_dir: Path, lock_dirs: Iterable[Path], timeout_s: float = HANG_S) -> Leftovers:
    """Servers, watchdogs, ports and GPU locks still held after a search.

    Everything is polled until all of it is gone, up to ``timeout_s``: a server's port and GPU lock
    outlive its process by as long as whoever holds them takes to exit (a Ray worker holds the
    port's reservation until it has exited, which on a loaded box comes seconds after its server
    was killed), so one look right after the servers are gone can catch them on their way out.
    What is still there at the deadline is what was left behind.
    """
    lock_dirs = list(lock_dirs)
    t0 = time.monotonic()

    def look() -> Leftovers:
        return Leftovers(servers=servers_with_token(token),
                         ports=held_ports(ports_from_logs(log_dir), token),
                         gpu_locks=held_gpu_locks(lock_dirs))

    deadline = t0 + timeout_s
    left = look()
    while left.count and time.monotonic() < deadline:
        time.sleep(0.5)
        left = look()
    left.waited_s = time.monotonic() - t0
    return left
