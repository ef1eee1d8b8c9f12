"""Where a warm SGLang launch spends the seconds before its scheduler starts: a stack sampler in the launcher.

    python3 scripts/gpu/launcher_profile.py --run-json RUN.json --out DIR [--label NAME] [--timeout-s 240]
    (run it under ``setsid``: it ends its own process group, the server's children with it)

A diagnosis, not a measurement: nothing here is scored. The interpreter is set up as a standby
launcher is (``autotune/server/_standby.py``): the backend's ``preimport`` modules imported first,
then the server's argv (and environment) from a trial's record (``RUN.json``: its ``argv`` and
``env``, a free ``--port`` added) and SGLang's launcher run as ``__main__`` in this process. From that
hand-over to the first ``/health`` that answers 200, a thread samples the main thread's stack every
5 ms (``sys._current_frames``); each sample is given the time since the one before. The server's
children are spawned here (no fork server), so only the launcher's own timeline up to its
scheduler's ``Process.start`` is the fork server's case; what follows it overlaps the scheduler.

Written to ``DIR/launcher-profile-NAME.json``, and as text to ``DIR/launcher-profile-NAME.txt``: the
markers (hand-over, each ``multiprocessing`` start and the process's name, healthy), a timeline of
the stretches of at least 50 ms spent under one SGLang call chain, and the inclusive seconds of the
modules imported and the functions run before the scheduler's start.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import multiprocessing.process
import os
import runpy
import signal
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))

from autotune.backend import BACKENDS  # noqa: E402

Frame = tuple[str, str, int]


class Sampler(threading.Thread):
    """The main thread's stack every ``interval_s``, with the seconds since the sample before."""

    def __init__(self, *, ident: int, t0: float, interval_s: float = 0.005) -> None:
        super().__init__(daemon=True, name="launcher-profile-sampler")
        self.target, self.t0, self.interval_s = ident, t0, interval_s
        self.samples: list[tuple[float, float, tuple[Frame, ...]]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        last = time.perf_counter()
        while not self.halt.wait(self.interval_s):
            now = time.perf_counter()
            frame = sys._current_frames().get(self.target)
            stack: list[Frame] = []
            while frame is not None:
                stack.append((frame.f_code.co_filename, frame.f_code.co_name, frame.f_lineno))
                frame = frame.f_back
            self.samples.append((now - self.t0, now - last, tuple(reversed(stack))))
            last = now


def _short(path: str) -> str:
    for root in ("/site-packages/", "/site/", "/lib/python3"):
        if root in path:
            return path.split(root, 1)[1]
    return path


def _ours(frame: Frame) -> bool:
    name = frame[0]
    return "importlib" not in name and "<frozen" not in name and not name.endswith(("runpy.py", __file__))


def summarise(samples: list[tuple[float, float, tuple[Frame, ...]]], *, until: float) -> dict[str, Any]:
    """Inclusive seconds per imported module and per function, and the timeline, up to ``until``."""
    modules: dict[str, float] = collections.defaultdict(float)
    functions: dict[str, float] = collections.defaultdict(float)
    segments: list[list[Any]] = []
    for at, dt, stack in samples:
        if at > until:
            break
        seen_m, seen_f = set(), set()
        for frame in stack:
            if frame[1] == "<module>":
                seen_m.add(_short(frame[0]))
            if _ours(frame):
                seen_f.add(f"{_short(frame[0])}:{frame[1]}")
        for key in seen_m:
            modules[key] += dt
        for key in seen_f:
            functions[key] += dt
        chain = [f"{_short(f[0]).rsplit('/', 1)[-1]}:{f[1]}" for f in stack if _ours(f) and "sglang" in f[0]][:5]
        label = " > ".join(chain) or "(outside SGLang)"
        if segments and segments[-1][2] == label:
            segments[-1][1] = at
        else:
            segments.append([at - dt, at, label])
    def top(seconds: dict[str, float], n: int) -> list[list[Any]]:
        return [[k, round(v, 3)] for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])[:n]]

    return {"until_s": round(until, 3), "modules": top(modules, 40), "functions": top(functions, 60),
            "timeline": [[round(a, 3), round(b, 3), label] for a, b, label in segments if b - a >= 0.05]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-json", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--label", default="1")
    parser.add_argument("--timeout-s", type=float, default=240.0)
    parser.add_argument("--backend", default="sglang", choices=sorted(BACKENDS), help="sim: a dry run here")
    parser.add_argument("--main-block", action="store_true",
                        help="also import the backend's main_block modules first, as a standby does by default")
    args = parser.parse_args(argv)
    record = json.loads(args.run_json.read_text())
    backend = BACKENDS[args.backend]
    t_start = time.perf_counter()
    for name in (*backend.preimport, *(backend.main_block if args.main_block else ())):
        importlib.import_module(name)
    import_s = time.perf_counter() - t_start
    modules_before = len(sys.modules)
    port = _free_port()
    server_argv = [*record["argv"][3:], "--port", str(port)]
    os.environ.update(record["env"])
    out = args.out / f"launcher-profile-{args.label}.json"
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    marks: list[list[Any]] = [[0.0, "hand-over"]]
    start = multiprocessing.process.BaseProcess.start

    def marked_start(self: multiprocessing.process.BaseProcess) -> None:
        target = getattr(self, "_target", None)
        marks.append([round(time.perf_counter() - t0, 3), f"start {getattr(target, '__name__', self.name)}"])
        start(self)

    multiprocessing.process.BaseProcess.start = marked_start  # type: ignore[method-assign]
    sampler = Sampler(ident=threading.get_ident(), t0=t0)

    def finish(healthy: bool) -> None:
        sampler.halt.set()
        sampler.join(timeout=5)
        end = time.perf_counter() - t0
        marks.append([round(end, 3), "healthy" if healthy else "timed out"])
        scheduler_at = next((at for at, what in marks if "scheduler" in what), end)
        report: dict[str, Any] = {"preimport_s": round(import_s, 3), "modules_at_hand_over": modules_before,
                  "argv": server_argv, "marks": marks, "samples": len(sampler.samples),
                  "to_scheduler_start": summarise(sampler.samples, until=scheduler_at),
                  "to_healthy": summarise(sampler.samples, until=end)}
        out.write_text(json.dumps(report, indent=1))
        lines = [f"preimport {import_s:.2f} s ({modules_before} modules); marks: "
                 + "; ".join(f"{what} {at:.2f} s" for at, what in marks),
                 "timeline to the scheduler's start (stretches >= 50 ms):"]
        lines += [f"  {a:7.3f}-{b:7.3f}  {label}" for a, b, label in report["to_scheduler_start"]["timeline"]]
        lines.append("modules imported before the scheduler's start (inclusive s):")
        lines += [f"  {v:7.3f}  {k}" for k, v in report["to_scheduler_start"]["modules"][:25]]
        lines.append("functions before the scheduler's start (inclusive s):")
        lines += [f"  {v:7.3f}  {k}" for k, v in report["to_scheduler_start"]["functions"][:40]]
        out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
        os.killpg(os.getpgrp(), signal.SIGKILL)

    def watch() -> None:
        url = f"http://127.0.0.1:{port}/health"
        while time.perf_counter() - t0 < args.timeout_s:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        finish(True)
            except OSError:
                pass
            time.sleep(0.05)
        finish(False)

    threading.Thread(target=watch, daemon=True, name="launcher-profile-health").start()
    sampler.start()
    sys.argv = [backend.module, *server_argv]
    runpy.run_module(backend.module, run_name="__main__", alter_sys=True)
    return 1  # the server returned before it was healthy


if __name__ == "__main__":
    sys.exit(main())
