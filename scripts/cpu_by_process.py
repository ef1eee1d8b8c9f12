"""``python scripts/cpu_by_process.py [--interval S] [--json FILE] -- COMMAND ...``.

Runs COMMAND and prints, when it ends, the CPU seconds (user + system) that every process on the
machine used while it ran, summed by kind: Ray workers, raylets, emulator servers, search drivers,
MLflow servers, and so on. It answers "where does the suite's CPU go?" on a box where the suite is
CPU-bound, which ``pytest --durations`` (wall time per test) cannot.

How: ``/proc`` is read every ``--interval`` seconds; each process's last reading counts. A process
that lives less than one interval may be missed, and one that outlives its last reading loses the
CPU it used after it, at most one interval's worth. Processes that were already running before
COMMAND started count only what they used after it started. Linux only.

Exit status: COMMAND's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

# (pattern in the command line, kind), first match wins. Ray's processes retitle themselves
# (``ray::IDLE``, ``ray::DashboardAgent``) after they start, so both spellings of each map to one kind;
# the raylet's command line holds the agents' command lines, a Ray worker's names the raylet's
# socket, and an emulator's names pytest's temporary folders, so the specific patterns come first.
KINDS = (("ray/raylet/raylet ", "raylet"), ("ray::DashboardAgent", "ray dashboard agent"),
         ("dashboard/agent.py", "ray dashboard agent"),
         ("ray::RuntimeEnvAgent", "ray runtime_env agent"), ("runtime_env/agent", "ray runtime_env agent"),
         ("dashboard/dashboard.py", "ray dashboard head"), ("default_worker", "ray worker"),
         ("ray::", "ray worker"), ("gcs_server", "ray gcs_server"),
         ("log_monitor", "ray log_monitor"), ("autoscaler/_private/monitor.py", "ray monitor"),
         ("autotune.sim", "autotune.sim"), ("autotune.search", "autotune.search"),
         ("autotune.trial", "autotune.trial"), ("autotune.nccl", "autotune.nccl"), ("mlflow", "mlflow"),
         ("chromium", "chromium"), ("pytest", "pytest"), ("-u -c", "pytest-xdist worker"))
_TICK = os.sysconf("SC_CLK_TCK")


def kind_of(argv: list[str]) -> str:
    """The kind a command line is counted under (its first matching :data:`KINDS` entry)."""
    line = " ".join(argv)
    for pattern, kind in KINDS:
        if pattern in line:
            return kind
    return " ".join([Path(argv[0]).name, *argv[1:3]])[:60] if argv else "?"


def _read(pid: int) -> tuple[int, float] | None:
    """(start tick, CPU seconds) of ``pid``, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]), (int(fields[11]) + int(fields[12])) / _TICK


def _argv(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a] or None


def measure(argv: list[str], *, interval_s: float) -> tuple[int, float, dict[str, list[float]]]:
    """Run ``argv``; returns (exit status, wall seconds, kind -> [processes, CPU seconds])."""
    me = os.getpid()
    before = {}
    for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
        if (reading := _read(pid)) is not None:
            before[(pid, reading[0])] = reading[1]
    seen: dict[tuple[int, int], list] = {}  # (pid, start tick) -> [kind, CPU seconds]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv)
    while True:
        done = proc.poll() is not None
        for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
            if pid == me or (reading := _read(pid)) is None:
                continue
            key = (pid, reading[0])
            # Read again each time: a process first seen between its fork and its exec still shows
            # its parent's command line (sh's, for a command sh starts), and exec keeps the pid.
            args = _argv(pid)
            if key in seen:
                seen[key] = [kind_of(args) if args is not None else seen[key][0], reading[1]]
            elif args is not None:
                seen[key] = [kind_of(args), reading[1]]
        if done:
            break
        time.sleep(interval_s)
    wall = time.monotonic() - t0
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for key, (kind, cpu) in seen.items():
        by_kind[kind][0] += 1
        by_kind[kind][1] += cpu - before.get(key, 0.0)
    return proc.returncode, wall, dict(by_kind)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                     usage="%(prog)s [--interval S] [--json FILE] -- COMMAND ...")
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between readings (0.25)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- make test")
    if args.interval <= 0:
        parser.error(f"--interval must be above 0 seconds, got {args.interval}")
    rc, wall, by_kind = measure(command, interval_s=args.interval)
    total = sum(cpu for _, cpu in by_kind.values())
    print(f"wall {wall:.1f} s, CPU {total:.1f} s in all (exit status {rc})", file=sys.stderr)
    for kind, (count, cpu) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{cpu:9.1f} s  {int(count):4d} processes  {kind}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "exit_status": rc, "wall_s": round(wall, 2),
                                         "cpu_s": round(total, 2),
                                         "by_kind": {k: {"processes": int(n), "cpu_s": round(c, 2)}
                                                     for k, (n, c) in by_kind.items()}}, indent=2) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
