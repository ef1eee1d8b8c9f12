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

With ``--descendants`` instead of a group, it watches a search driver the same way and, when the
driver dies, kills every process the driver started after the watchdog did, and their descendants
(an embedded Ray's node processes and workers, and the servers under them)::

    python -m autotune.server._reaper OWNER_PID --descendants [--spare PID:START,...] [--poll S]

Ray's GCS and raylet die with the driver, but the raylet's agents and workers, re-parented, take
about a minute to notice; by then nothing links them to the driver. So while the driver lives the
watchdog keeps a list of its descendants, refreshed every ``--poll`` seconds (pid and start time,
so a reused pid is never taken for one), and kills those still alive: each by pid, and a process
group only when its leader is on the list (a group the search did not start, such as the shell
job's own the driver may share with ``tee``, is never signalled).

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
from collections.abc import Callable

RELEASE = b"release"
"""What the owner writes on the pipe to tell the reaper its group has already been stopped."""

_PROC = "/proc"


def _proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state letter, parent pid, process group id, start time in clock ticks after boot) of
    ``pid`` from /proc, or None if it is gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; everything after the last ')'
    # is fixed-format: state, ppid, pgrp, ... and the start time, field 22.
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return fields[0].decode("ascii"), int(fields[1]), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _proc_state(pid: int) -> tuple[str, int] | None:
    """Return (state letter, process group id) of ``pid`` from /proc, or None if it is gone."""
    stat = _proc_stat(pid)
    return None if stat is None else (stat[0], stat[2])


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


def _parent_gone(parent_pid: int, stdin_fd: int, poll_s: float,
                 each_poll: Callable[[], None] | None = None) -> bool:
    """Block until the parent is gone (True) or releases the group (False); ``each_poll`` runs
    once a poll while the parent lives."""
    while True:
        if os.getppid() != parent_pid:
            return True
        if each_poll is not None:
            each_poll()
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


_Stat = tuple[str, int, int, int]


def _table() -> dict[int, _Stat]:
    """Every live (non-zombie) process: pid -> :func:`_proc_stat`."""
    table = {}
    for name in os.listdir(_PROC):
        if name.isdigit():
            stat = _proc_stat(int(name))
            if stat is not None and stat[0] not in ("Z", "X"):
                table[int(name)] = stat
    return table


def children_of(owner: int) -> set[tuple[int, int]]:
    """``(pid, start time)`` of each live child of ``owner`` now."""
    return {(pid, st[3]) for pid, st in _table().items() if st[1] == owner}


class Descendants:
    """The processes an owner started after this watchdog did, and theirs: kept while the owner
    lives (:meth:`refresh`), killed when it is gone (:meth:`kill`).

    Args:
        owner: The owner's pid (the search driver).
        me: This watchdog's pid, never on the list (it is the owner's child too).
        spare: ``(pid, start time)`` of the children the owner had before it started the watchdog
            (:func:`children_of`): not the search's (a notebook's or a test's own), never listed.
    """

    def __init__(self, owner: int, *, me: int, spare: set[tuple[int, int]]) -> None:
        stat = _proc_stat(owner)
        self.owner, self.me, self.before = owner, me, set(spare)
        self.owner_start = stat[3] if stat is not None else None
        self.known: dict[int, int] = {}  # pid -> start time

    def _alive(self, table: dict[int, _Stat]) -> dict[int, int]:
        return {pid: start for pid, start in self.known.items()
                if pid in table and table[pid][3] == start}

    def refresh(self, table: dict[int, _Stat] | None = None) -> None:
        """Add the owner's descendants now (and those of every listed process that re-parented),
        and drop the listed ones that ended."""
        table = _table() if table is None else table
        children: dict[int, list[int]] = {}
        for pid, st in table.items():
            children.setdefault(st[1], []).append(pid)
        known = self._alive(table)
        roots = list(known)
        if self.owner in table and table[self.owner][3] == self.owner_start:
            roots.append(self.owner)
        while roots:
            for child in children.get(roots.pop(), ()):
                start = table[child][3]
                if child == self.me or child in known or (child, start) in self.before:
                    continue
                known[child] = start
                roots.append(child)
        self.known = known

    def kill(self, *, kill_wait_s: float = 5.0) -> tuple[int, list[int]]:
        """SIGKILL every listed process still alive: a group whose leader is listed as a group,
        the rest by pid; again for any found under them meanwhile.

        Returns:
            How many processes were signalled, and the pids still alive after ``kill_wait_s``.
        """
        signalled: set[int] = set()
        for _ in range(3):
            table = _table()
            self.refresh(table)
            targets = self._alive(table)
            fresh = set(targets) - signalled
            if not fresh:
                break
            for pid in fresh:
                if table[pid][2] == pid:  # a group it leads: a server's, a Ray worker's
                    signal_group(pid, signal.SIGKILL)
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            signalled |= fresh
        deadline = time.monotonic() + kill_wait_s
        while True:
            left = sorted(self._alive(_table()))
            if not left or time.monotonic() > deadline:
                return len(signalled), left
            time.sleep(0.05)


def _watch_descendants(owner: int, poll_s: float, spare: str) -> int:
    """``--descendants``: keep the owner's descendants listed; kill them if it dies unreleased."""
    pairs = {tuple(int(x) for x in item.split(":", 1)) for item in spare.split(",") if item}
    tree = Descendants(owner, me=os.getpid(), spare={(p[0], p[1]) for p in pairs})
    if not _parent_gone(owner, sys.stdin.fileno(), poll_s, each_poll=tree.refresh):
        return 0
    count, left = tree.kill()
    if count:
        print(f"[autotune watchdog] search driver pid {owner} is gone; killed {count} process(es) it "
              "had started", file=sys.stderr, flush=True)
    if left:
        print(f"[autotune watchdog] still alive after SIGKILL: {left}", file=sys.stderr, flush=True)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the watchdog; see the module docstring."""
    parser = argparse.ArgumentParser(prog="autotune.server._reaper", description=__doc__.split("\n")[0])
    parser.add_argument("parent_pid", type=int)
    parser.add_argument("pgid", type=int, nargs="?", help="the server's process group")
    parser.add_argument("--descendants", action="store_true",
                        help="instead of a group: everything the parent starts from now on")
    parser.add_argument("--spare", default="", help="--descendants: PID:START,... of the children not to list")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between parent checks")
    args = parser.parse_args(argv)
    if args.parent_pid <= 0 or (args.descendants == (args.pgid is not None)) or (
            args.pgid is not None and args.pgid <= 1):
        parser.error("give parent_pid and either a pgid > 1 or --descendants")
    # The reaper must outlive a Ctrl-C aimed at its owner; it is in its own session already, this
    # also covers a caller that started it without one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.descendants:
        return _watch_descendants(args.parent_pid, args.poll, args.spare)
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
