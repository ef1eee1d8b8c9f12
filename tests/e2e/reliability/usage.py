"""What the emulator recorded about GPU use, joined with the trials that caused it.

Each server appends ``{pid, cuda_visible_devices, tp_size, port, start, end}`` to
``<lock dir>/usage.jsonl`` when it exits (the lock dir is per node, see ``reliability.cluster``).
Each ``ServerProcess`` log (``<exp>/logs/<trial name>[-baseline]-<worker pid>-<ms>.log``, or
``finalists/finalist...``) starts with ``[autotune] launch N on port P``. Joining the two on the
port (and time) gives, for every server, the trial and the Ray worker pid that started it.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

_LOG_NAME = re.compile(r"^(?P<label>.+?)-(?P<pid>\d+)-(?P<ms>\d+)\.log$")
_LAUNCH = re.compile(r"^\[autotune\] launch \d+ on port (\d+):", re.MULTILINE)


@dataclass(frozen=True)
class Use:
    """One server's claim on GPUs of one node."""

    node: str
    pid: int
    gpus: tuple[str, ...]
    tp_size: int
    port: int
    start: float
    end: float


@dataclass(frozen=True)
class ServerLog:
    """One ``ServerProcess`` log file: the trial label, the worker pid, when measure() began."""

    path: Path
    label: str
    worker_pid: int
    began: float
    ports: tuple[int, ...]

    @property
    def trial_id(self) -> str | None:
        """The Ray trial id (``trainable_<id>`` labels), None for finalists."""
        m = re.match(r"^trainable_([0-9a-f]+)", self.label)
        return m[1] if m else None


def read_usage(lock_dirs: dict[str, Path]) -> list[Use]:
    """Every usage line of every node, oldest first."""
    uses = []
    for node, d in lock_dirs.items():
        path = d / "usage.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            cvd = rec.get("cuda_visible_devices")
            gpus = tuple(g.strip() for g in cvd.split(",")) if cvd else ()
            uses.append(Use(node=node, pid=int(rec["pid"]), gpus=gpus, tp_size=int(rec["tp_size"]),
                            port=int(rec["port"]), start=float(rec["start"]), end=float(rec["end"])))
    return sorted(uses, key=lambda u: u.start)


def read_logs(exp_root: Path) -> list[ServerLog]:
    """Every server log under a search's Ray directory."""
    logs = []
    for path in exp_root.rglob("*.log"):
        m = _LOG_NAME.match(path.name)
        if not m:
            continue
        ports = tuple(int(p) for p in _LAUNCH.findall(path.read_text(errors="replace")))
        logs.append(ServerLog(path=path, label=m["label"], worker_pid=int(m["pid"]),
                              began=int(m["ms"]) / 1000.0, ports=ports))
    return logs


def log_of(use: Use, logs: list[ServerLog]) -> ServerLog | None:
    """The log of the server behind ``use``: same port, the latest measure() begun before it."""
    candidates = [g for g in logs if use.port in g.ports and g.began <= use.start + 1.0]
    return max(candidates, key=lambda g: g.began, default=None)


def overlaps_per_gpu(uses: list[Use]) -> list[tuple[Use, Use, str]]:
    """Pairs of servers that held the same GPU of the same node at the same time."""
    by_gpu: dict[tuple[str, str], list[Use]] = defaultdict(list)
    for u in uses:
        for g in u.gpus:
            by_gpu[(u.node, g)].append(u)
    bad = []
    for (node, gpu), items in by_gpu.items():
        items.sort(key=lambda u: u.start)
        for a, b in itertools.pairwise(items):
            if b.start < a.end:
                bad.append((a, b, f"{node}/gpu{gpu}"))
    return bad


def overlaps_per_node(uses: list[Use]) -> list[tuple[Use, Use]]:
    """Pairs of servers that ran on the same node at the same time (any GPUs)."""
    by_node: dict[str, list[Use]] = defaultdict(list)
    for u in uses:
        by_node[u.node].append(u)
    bad = []
    for items in by_node.values():
        items.sort(key=lambda u: u.start)
        latest_end: Use | None = None
        for u in items:
            if latest_end is not None and u.start < latest_end.end:
                bad.append((latest_end, u))
            if latest_end is None or u.end > latest_end.end:
                latest_end = u
    return bad


def max_concurrent(uses: list[Use]) -> int:
    """Most servers alive at once, over all nodes."""
    events = sorted([(u.start, 1) for u in uses] + [(u.end, -1) for u in uses])
    best = cur = 0
    for _, delta in events:
        cur += delta
        best = max(best, cur)
    return best
