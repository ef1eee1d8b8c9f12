"""A search's folders: ``mlruns/ray/<name>/`` held by one running search, and its run folders.

Two searches of one name in one folder would share their run folders (named to the second) and
their MLflow experiment; the second is refused before it starts anything, naming the first's pid.
A run folder is one start of the search (``run-<time>``); ``--resume`` goes on with the latest
that Ray Tune saved its state in, unless that search has concluded (its finalists confirmed, its
winner named): resuming it would only pay for the finalists' servers again.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import TextIO

from autotune.errors import ConfigError
from autotune.server._reaper import pid_alive

#: The file a running search holds; it says the search's pid.
LOCK_FILE = ".running"
#: Written in a run folder once its search has concluded; ``--resume`` refuses such a folder.
CONCLUDED_FILE = "concluded"

#: How long a refused search waits for the holder's pid to appear in LOCK_FILE.
PID_WAIT_S = 5.0

_HELD: dict[Path, TextIO] = {}  # folder -> its open, locked file, for this process's lifetime


def hold(folder: Path, name: str) -> None:
    """Take search ``name``'s folder for this process until it exits (again: nothing happens).

    Raises:
        ConfigError: Another process holds it: "a search named NAME is running (pid N)".
    """
    folder = folder.resolve()
    if folder in _HELD:
        return
    folder.mkdir(parents=True, exist_ok=True)
    fh = open(folder / LOCK_FILE, "a+")  # noqa: SIM115 - kept open: the lock lives with it
    if not _lock(fh):
        pid = _holder_pid(fh)
        if pid is not None:
            fh.close()
            raise ConfigError(f"a search named {name!r} is running (pid {pid}) in {folder.parent.parent.parent}; "
                              "wait for it to end, or give this one another --name", field="name")
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    _HELD[folder] = fh


def _lock(fh: TextIO) -> bool:
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _holder_pid(fh: TextIO) -> str | None:
    """The holder's pid, or None once this process holds the lock (the holder ended meanwhile).

    The holder writes its pid just after it takes the lock, so a file read in between is empty, or
    still says the pid of an earlier search, now ended: wait for a live pid rather than name the
    wrong process or none.
    """
    deadline = time.monotonic() + PID_WAIT_S
    while True:
        fh.seek(0)
        pid = fh.read().strip()
        if pid.isdigit() and int(pid) > 0 and pid_alive(int(pid)):
            return pid
        if _lock(fh):
            return None
        if time.monotonic() >= deadline:
            return "unknown"
        time.sleep(0.02)


def release(folder: Path) -> None:
    """Let the folder go (a search that ended, in a process that goes on: tests, notebooks)."""
    fh = _HELD.pop(folder.resolve(), None)
    if fh is not None:
        fh.close()


def experiment_dir(root: Path, name: str, *, resume: bool) -> tuple[Path, str, bool]:
    """``(storage, run_name, restoring)``: a fresh run dir, or the latest one with --resume."""
    storage = root / "mlruns" / "ray" / name
    storage.mkdir(parents=True, exist_ok=True)
    runs = sorted(p.name for p in storage.iterdir()
                  if p.is_dir() and p.name.startswith("run-") and resumable(p))
    if resume:
        if not runs:
            raise ConfigError(f"--resume: no earlier search named {name!r} under {storage} got as far as its "
                              "trials; start it without --resume")
        concluded = storage / runs[-1] / CONCLUDED_FILE
        if concluded.is_file():
            when = concluded.read_text().strip() or "earlier"
            raise ConfigError(f"--resume: search {name!r} already finished ({runs[-1]} concluded at {when}): "
                              "nothing is left to resume; its winner is in its summary and MLflow "
                              "(python -m autotune.export). Start it again without --resume for a new "
                              "search", field="resume")
        return storage, runs[-1], True
    return storage, time.strftime("run-%Y%m%d-%H%M%S"), False


def mark_concluded(exp_dir: Path) -> None:
    """Record that the search of run folder ``exp_dir`` concluded (``--resume`` then refuses it)."""
    (exp_dir / CONCLUDED_FILE).write_text(time.strftime("%Y-%m-%d %H:%M:%S %Z") + "\n")


def resumable(exp_dir: Path) -> bool:
    """Whether Ray Tune saved a run folder's state, so that ``--resume`` can go on with it (a search
    stopped before its fit began leaves the folder with its tracking spool only)."""
    return (exp_dir / "tuner.pkl").is_file()


def search_command(space_arg: str, name: str, *, resume: bool = False) -> str:
    """The documented command that starts (``resume``: continues) search ``name`` of ``space_arg``:
    the one every interrupted search prints (README's ``python -m autotune.search``)."""
    return f"python -m autotune.search --space {space_arg} --name {name}" + (" --resume" if resume else "")


__all__ = ["CONCLUDED_FILE", "LOCK_FILE", "experiment_dir", "hold", "mark_concluded", "release", "resumable",
           "search_command"]
