"""Where a real SGLang server's start-up goes, from the trial server logs of a search.

Usage (here, on a run brought back from the remote GPU host and unpacked, see collect_search.py):
    python3 scripts/gpu/startup_breakdown.py LOG [LOG ...] [--json OUT]

Each trial log is named ``<trial>-<pid>-<launch ms since the epoch>.log`` by the launcher, and
SGLang stamps its own lines to the second. The stages, from those stamps:
- ``launcher``: launch to SGLang's first line (``python -m sglang.launch_server`` importing SGLang,
  torch and their dependencies, and parsing its arguments);
- ``tokenizer+spawn``: to the scheduler's "Init torch distributed begin" (the tokenizer manager
  loads the tokenizer; the scheduler process is spawned and imports SGLang again);
- ``scheduler``: to "Uvicorn running" (weights, KV pool, CUDA-graph capture, the HTTP server);
- ``warmup``: to the first ``GET /health`` answered 200 (SGLang's own warm-up request).
Each stage is good to about 1 s (SGLang's stamps are whole seconds). ``scheduler_e2e`` is SGLang's
own figure for its scheduler's start (``Engine startup timings``: from the top of
``Scheduler.__init__`` to its end, to the 10 ms), where the log has it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import sys
from pathlib import Path

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]")
E2E = re.compile(r"Engine startup timings \(s\):.*\bscheduler_e2e=([0-9.]+)")
MARKS = (("tokenizer+spawn", "Init torch distributed begin"), ("scheduler", "Uvicorn running"),
         ("warmup", '"GET /health HTTP/1.1" 200'))


def breakdown(log: Path) -> dict:
    """The stages of one server start, in seconds; a stage whose mark is missing is None."""
    launch_ms = re.search(r"-(\d{13})\.log$", log.name)
    if launch_ms is None:
        raise ValueError(f"{log}: not a trial server log (name should end in -<launch ms>.log)")
    t = int(launch_ms.group(1)) / 1e3
    out: dict = {"log": log.name}
    first = None
    found: dict[str, float] = {}
    out["scheduler_e2e"] = None
    for line in log.read_text(errors="replace").splitlines():
        if out["scheduler_e2e"] is None and (e2e := E2E.search(line)):
            out["scheduler_e2e"] = float(e2e.group(1))
        m = STAMP.match(line)
        if not m:
            continue
        when = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc).timestamp()
        first = when if first is None else first
        for stage, mark in MARKS:
            if stage not in found and mark in line:
                found[stage] = when
    out["launcher"] = None if first is None else first - t
    prev = first
    for stage, _ in MARKS:
        at = found.get(stage)
        out[stage] = None if at is None or prev is None else at - prev
        prev = at if at is not None else prev
    out["total"] = (found["warmup"] - t) if "warmup" in found else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = [breakdown(p) for p in args.logs]
    stages = ["launcher", *(s for s, _ in MARKS), "total"]
    print("| log | " + " | ".join(stages) + " |\n|---|" + "---|" * len(stages))
    for r in rows:
        print(f"| {r['log']} | " + " | ".join("-" if r[s] is None else f"{r[s]:.0f}" for s in stages) + " |")
    medians = {s: statistics.median(v) for s in stages if (v := [r[s] for r in rows if r[s] is not None])}
    print("| median | " + " | ".join(f"{medians[s]:.0f}" if s in medians else "-" for s in stages) + " |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "median_s": medians}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
