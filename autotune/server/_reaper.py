"""Process-group helpers, and a watchdog that kills a server's group when its owner dies.

`ServerProcess` starts each server in its own session, so nothing kills the server when the Python
process that started it is SIGKILLed (a Ray worker killed by the raylet, an OOM kill, ``kill -9``).
This module, run as a tiny sidecar process, closes that gap::

    python -m autotune.server._reaper PARENT_PID PGID [--grace S] [--poll S]

It watches its parent through two independent signals: end-of-file on its stdin (a pipe whose
only write end the parent holds) and a change of ``os.getppid()`` (it was re-parented, which also
covers a forked copy of the parent keeping the pipe open). When either fires, it sends SIGTERM to
the process group, waits ``--grace`` seconds, sends SIGKILL, and exits. When the parent stopped the
server itself, it writes ``release`` to the pipe and the reaper exits without touching anything.

The module is standard-library only and has no package-relative imports, so the sidecar can be run
from its file path with ``python -I`` (fast start, immune to the caller's ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import time

RELEASE = b"release"
"""What the owner writes on the pipe to tell the reaper its group has already been stopped."""

_PROC = "/proc"


def _proc_state(pid: int) -> tuple[str, int] | None:
    """Return (state letter, process group id) of ``pid`` from /proc, or None if it is gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; everything after the last ')'
    # is fixed-format: state, ppid, pgrp, ...
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return fields[0].decode("ascii"), int(fields[2])
    except (IndexError, ValueError):
        return None


def _has_proc() -> bool:
    return os.path.isdir(f"{_PROC}/self")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie.

    Zombies count as dead: a killed grandchild whose new parent has not reaped it yet holds no
    memory, GPU or port.
    """
    if pid <= 0:
        raise ValueError(f"pid must be a positive integer, got {pid}")
    if _has_proc():
        state = _proc_state(pid)
        return state is not None and state[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid``.

    On systems without /proc this returns ``[pgid]`` while the group has any member, because the
    members cannot be listed there.
    """
    if pgid <= 1:
        raise ValueError(f"pgid must be an integer > 1, got {pgid}")
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []  # no member at all, zombie or not: the cheap common case after a stop
    except PermissionError:
        pass
    if not _has_proc():
        return [pgid]
    members = []
    for name in os.listdir(_PROC):
        if not name.isdigit():
            continue
        state = _proc_state(int(name))
        if state is not None and state[1] == pgid and state[0] not in ("Z", "X"):
            members.append(int(name))
    return members


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process remains in process group ``pgid``."""
    return bool(group_members(pgid))


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``; a group that is already gone is not an error."""
    if pgid <= 1:
        raise ValueError(f"refusing to signal process group {pgid}")
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        if not group_alive(pgid):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.1)


def kill_group(pgid: int, *, grace_s: float, kill_wait_s: float = 5.0) -> bool:
    """Stop every process of group ``pgid``: SIGTERM, up to ``grace_s`` to exit, then SIGKILL.

    Args:
        pgid: The process group to stop. Only pass a group you created.
        grace_s: Seconds the group gets to exit after SIGTERM. 0 sends SIGKILL right after SIGTERM.
        kill_wait_s: Seconds to wait for the group to vanish after SIGKILL.

    Returns:
        True when no live process of the group remains.
    """
    if grace_s < 0:
        raise ValueError(f"grace_s must be >= 0, got {grace_s}")
    if not group_alive(pgid):
        return True
    signal_group(pgid, signal.SIGTERM)
    if _wait_group_gone(pgid, grace_s):
        return True
    signal_group(pgid, signal.SIGKILL)
    return _wait_group_gone(pgid, kill_wait_s)


def _parent_gone(parent_pid: int, stdin_fd: int, poll_s: float) -> bool:
    """Block until the parent is gone (True) or releases the group (False)."""
    while True:
        if os.getppid() != parent_pid:
            return True
        try:
            readable, _, _ = select.select([stdin_fd], [], [], poll_s)
        except InterruptedError:
            continue
        if not readable:
            continue
        data = os.read(stdin_fd, 64)
        if not data:
            return True  # every write end closed: the parent exited or was killed
        if RELEASE in data:
            return False


def main(argv: list[str] | None = None) -> int:
    """Run the watchdog; see the module docstring."""
    parser = argparse.ArgumentParser(prog="autotune.server._reaper", description=__doc__.split("\n")[0])
    parser.add_argument("parent_pid", type=int)
    parser.add_argument("pgid", type=int)
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between parent checks")
    args = parser.parse_args(argv)
    if args.pgid <= 1 or args.parent_pid <= 0:
        parser.error("parent_pid and pgid must be real process ids")
    # The reaper must outlive a Ctrl-C aimed at its owner; it is in its own session already, this
    # also covers a caller that started it without one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _parent_gone(args.parent_pid, sys.stdin.fileno(), args.poll):
        return 0
    if group_alive(args.pgid):
        print(f"[autotune reaper] owner pid {args.parent_pid} is gone; stopping process group "
              f"{args.pgid}", file=sys.stderr, flush=True)
        if not kill_group(args.pgid, grace_s=args.grace):
            print(f"[autotune reaper] process group {args.pgid} survived SIGKILL: "
                  f"{group_members(args.pgid)}", file=sys.stderr, flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
