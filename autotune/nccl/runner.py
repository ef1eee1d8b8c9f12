"""Running NCCL probe candidates in fresh worker processes, one candidate measuring at a time.

Each candidate gets ``tp`` new processes (:mod:`autotune.nccl.worker`) in a process group of their
own, started with the candidate's environment. The next candidate's workers are started while the
current one measures (they import torch and create their CUDA context, then wait for a go), which
hides most of the start-up. A candidate that crashes, hangs or times out becomes a failed row
with a reason; its process group is killed. Every group this module started is killed on every
way out, Ctrl-C included; the workers also exit on their own when their parent disappears.

Only the standard library is imported: this runs on GPU boxes without Ray or MLflow.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.nccl.candidates import NcclCandidate, worker_env

_POLL_S = 0.02
_KILL_GRACE_S = 2.0
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)


@dataclass(frozen=True)
class RunSettings:
    """How the workers measure.

    Attributes:
        tp: Ranks (GPUs, or CPU processes for gloo).
        hidden: Hidden size: a message is ``tokens x hidden`` elements.
        tokens: Token counts, one message size each.
        iters: Timed all-reduces per size.
        warmup: Untimed all-reduces per size first.
        batch: Back-to-back all-reduces per timed sample (1: each call alone).
        backend: ``nccl`` or ``gloo``.
        timeout_s: Per candidate, from its go to its result.
        ready_timeout_s: Per candidate, from its start to all ranks ready.
    """

    tp: int
    hidden: int
    tokens: tuple[int, ...]
    iters: int
    warmup: int
    backend: str
    timeout_s: float = 60.0
    batch: int = 1
    ready_timeout_s: float = 180.0


@dataclass
class _Group:
    cand: NcclCandidate
    procs: list[subprocess.Popen]
    workdir: Path
    started: float
    done: bool = field(default=False)

    def status(self, rank: int) -> dict[str, Any] | None:
        path = self.workdir / f"rank{rank}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def log_tail(self, rank: int, *, lines: int = 6) -> str:
        try:
            text = (self.workdir / f"rank{rank}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def alive(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def kill(self) -> None:
        """SIGTERM then SIGKILL to this group only, then reap every worker."""
        if self.done:
            return
        self.done = True
        pgid = self.procs[0].pid
        for sig, grace in ((signal.SIGTERM, _KILL_GRACE_S), (signal.SIGKILL, 5.0)):
            # Signal the group only while one of its members is unreaped: then the id cannot
            # belong to anyone else.
            if not self.alive():
                break
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(_POLL_S)
        for p in self.procs:
            if p.poll() is None:
                p.wait()
            if p.stdin is not None:
                try:
                    p.stdin.close()
                except OSError:
                    pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawn(cand: NcclCandidate, settings: RunSettings, root: Path, index: int) -> _Group:
    workdir = root / f"cand{index:03d}"
    workdir.mkdir(parents=True, exist_ok=True)
    for rank in range(settings.tp):
        # A kept --workdir run again: an old "ready" or "done" would be read as this run's.
        (workdir / f"rank{rank}.json").unlink(missing_ok=True)
    env = dict(os.environ)
    for key, value in worker_env(cand).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env["PYTHONPATH"] = os.pathsep.join(
        [_REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    group = _Group(cand, [], workdir, time.monotonic())
    try:
        for rank in range(settings.tp):
            spec = {"rank": rank, "world": settings.tp, "backend": settings.backend,
                    "hidden": settings.hidden, "tokens": list(settings.tokens),
                    "iters": settings.iters, "warmup": settings.warmup, "batch": settings.batch,
                    "init_timeout_s": settings.timeout_s,
                    "status_file": str(workdir / f"rank{rank}.json")}
            with open(workdir / f"rank{rank}.log", "wb") as log:
                # The first worker leads a new process group (not the terminal's foreground one,
                # so a Ctrl-C reaches only the probe, which then stops them); the others join it.
                pgid = 0 if rank == 0 else group.procs[0].pid
                group.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "autotune.nccl.worker", json.dumps(spec)],
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
                    cwd=str(workdir), process_group=pgid))
    except BaseException:
        if group.procs:
            group.kill()
        raise
    return group


def _failure(group: _Group, phase: str) -> str | None:
    """Why a worker of the group is gone, or None while all live (or finished cleanly)."""
    for rank, p in enumerate(group.procs):
        code = p.poll()
        if code is not None and code != 0:
            tail = group.log_tail(rank)
            how = f"signal {-code}" if code < 0 else f"code {code}"
            return f"rank {rank} exited with {how} while {phase}" + (f": {tail}" if tail else "")
    return None


def _wait_ready(group: _Group, settings: RunSettings) -> str | None:
    deadline = group.started + settings.ready_timeout_s
    while True:
        states = [group.status(r) for r in range(settings.tp)]
        if all(s is not None and s.get("state") == "ready" for s in states):
            return None
        reason = _failure(group, "starting")
        if reason is None and any(p.poll() == 0 for p in group.procs):
            reason = "a worker exited before it was ready"
        if reason is not None:
            return reason
        if time.monotonic() > deadline:
            return f"workers not ready after {settings.ready_timeout_s:g} s"
        time.sleep(_POLL_S)


def _measure(group: _Group, settings: RunSettings) -> tuple[dict[str, Any] | None, str | None]:
    port = free_port()
    go = json.dumps({"port": port}) + "\n"
    for p in group.procs:
        if p.stdin is None:
            raise ValueError("an NCCL worker was started without a stdin pipe")
        try:
            p.stdin.write(go.encode())
            p.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # its exit shows up below
    deadline = time.monotonic() + settings.timeout_s
    while True:
        result = group.status(0)
        if result is not None and result.get("state") == "done":
            # Rank 0 writes after the group is torn down; the others exit right after it.
            return result, None
        reason = _failure(group, "measuring")
        if reason is None and group.procs[0].poll() == 0:
            reason = "rank 0 exited without a result"
        if reason is not None:
            return None, reason
        if time.monotonic() > deadline:
            return None, f"no result within {settings.timeout_s:g} s (timed out; killed)"
        time.sleep(_POLL_S)


@contextmanager
def _groups() -> Iterator[list[_Group]]:
    live: list[_Group] = []
    try:
        yield live
    finally:
        for group in live:
            group.kill()


def run_candidates(candidates: Sequence[NcclCandidate], settings: RunSettings, *,
                   workdir: str | None = None,
                   on_row: Callable[[dict[str, Any]], None] | None = None
                   ) -> list[dict[str, Any]]:
    """Measure each candidate in fresh processes; returns one raw row per candidate.

    A row is ``{"name", "env", "status": "ok"|"failed", "reason", "sizes", "wall_s", ...}``;
    ``sizes`` holds the worker's per-size statistics. Failed rows have ``sizes == []``.

    Args:
        candidates: What to probe, in order.
        settings: How.
        workdir: Where worker status files and logs go (a temporary folder if None; kept if
            given).
        on_row: Called with each row as it is done (progress output).
    """
    rows: list[dict[str, Any]] = []
    temp = None if workdir else tempfile.TemporaryDirectory(prefix="nccl-probe-")
    root = Path(temp.name) if temp is not None else Path(str(workdir))
    root.mkdir(parents=True, exist_ok=True)
    try:
        with _groups() as live:
            upcoming = _spawn(candidates[0], settings, root, 0) if candidates else None
            if upcoming is not None:
                live.append(upcoming)
            for index, cand in enumerate(candidates):
                group = upcoming
                if group is None:  # spawned before the loop or in the previous pass
                    raise ValueError(f"no worker group was started for {cand.name}")
                upcoming = None
                if index + 1 < len(candidates):
                    upcoming = _spawn(candidates[index + 1], settings, root, index + 1)
                    live.append(upcoming)
                t0 = time.monotonic()
                reason = _wait_ready(group, settings)
                result = None
                if reason is None:
                    result, reason = _measure(group, settings)
                group.kill()
                row = {"name": cand.name, "env": dict(cand.env),
                       "status": "ok" if reason is None else "failed", "reason": reason,
                       "sizes": list((result or {}).get("sizes", [])),
                       "wall_s": round(time.monotonic() - t0, 3),
                       "start_to_result_s": round(time.monotonic() - group.started, 3)}
                for key in ("dtype", "init_s", "torch_version", "nccl_version", "gpu_name",
                            "gpu_count", "env_seen"):
                    if result and key in result:
                        row[key] = result[key]
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    finally:
        if temp is not None:
            temp.cleanup()
    return rows
