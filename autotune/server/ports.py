"""Free TCP ports for servers, reserved so that no two autotune servers of a machine share one.

A reservation is an ``flock`` on one lock file per port in a directory every process of the
machine sees, so two servers started at the same time, by threads of one process or by different
processes, never get the same port; the kernel drops the lock when its holder dies, even by
SIGKILL. Candidates are drawn outside the kernel's ephemeral range, where outgoing connections
would steal them; :data:`BIND_FAILURE` recognises a server that lost its port anyway.
:class:`~autotune.server.process.ServerProcess` reserves its port here.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import re
import socket
import tempfile
from pathlib import Path
from typing import Self

from autotune.errors import ServerError

__all__ = ["BIND_FAILURE", "PortReservation", "port_in_use", "reserve_port"]

# What a server prints when its port was taken between our check and its bind (SGLang, uvicorn and
# Python's socketserver all produce one of these).
BIND_FAILURE = re.compile(r"address already in use|port is already in use|errno 98\b|eaddrinuse",
                          re.IGNORECASE)
_LOWEST_PORT = 20000  # below this live many well-known service ports


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
