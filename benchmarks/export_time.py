"""How long ``autotune export`` takes to answer from a local store, no GPU (issue 35: < 3 s).

    python -m benchmarks.export_time [--root DIR --name NAME] [--runs 7] [--trials 3]

Without ``--root``, a real emulator search of the packaged ``demo`` space (``--trials`` trials, then
its finalists) makes a local store in a temporary folder first (minutes). Then each export form
(``--format sh``, ``yaml``, ``json``) runs ``--runs`` times as a fresh process (imports included,
what a user waits for), once reading the sqlite store directly (the default) and once through
MLflow's client (``--via-mlflow``), the two alternated so that both see the same load. Prints, per
form and reader, the median and range of the wall time, the ratio of the medians, whether the two
readers printed byte-identical stdout and stderr, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORMS = ("sh", "yaml", "json")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _search(root: Path, name: str, trials: int) -> None:
    """A real emulator search of the demo space: the store export reads."""
    print(f"making the store: python -m autotune.search --space demo --trials {trials} --name {name} "
          f"(in {root})", file=sys.stderr, flush=True)
    proc = subprocess.run([sys.executable, "-m", "autotune.search", "--space", "demo", "--trials", str(trials),
                           "--name", name], cwd=root, env=_env(), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the search failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def _export(root: Path, name: str, fmt: str, *, via_mlflow: bool) -> tuple[float, str, str]:
    argv = [sys.executable, "-m", "autotune", "export", "--root", str(root), "--name", name, "--format", fmt]
    t0 = time.perf_counter()
    proc = subprocess.run([*argv, *(["--via-mlflow"] if via_mlflow else [])], cwd=root, env=_env(),
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {proc.returncode}):\n{proc.stderr}")
    return wall, proc.stdout, proc.stderr


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", help="project folder of an existing local store (default: make one)")
    ap.add_argument("--name", default="export-time", help="the search name in --root (default: export-time)")
    ap.add_argument("--runs", type=int, default=7, help="fresh processes per form and reader (default: 7)")
    ap.add_argument("--trials", type=int, default=3, help="trials of the search that makes the store (default: 3)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.trials < 1:
        ap.error("--runs and --trials must be at least 1")
    with tempfile.TemporaryDirectory(prefix="export-time-") as tmp:
        root = Path(args.root).resolve() if args.root else Path(tmp)
        if not args.root:
            _search(root, args.name, args.trials)
        print(f"store {root / 'mlruns' / 'mlflow.db'}, search {args.name!r}; {args.runs} fresh processes per form "
              f"and reader; load average before: {_load()}")
        print(f"{'form':6} {'direct (sqlite3) s':>24} {'via MLflow s':>24} {'ratio':>7}  identical")
        for fmt in FORMS:
            direct: list[float] = []
            via: list[float] = []
            same = True
            for _ in range(args.runs):
                wall_d, out_d, err_d = _export(root, args.name, fmt, via_mlflow=False)
                wall_m, out_m, err_m = _export(root, args.name, fmt, via_mlflow=True)
                direct.append(wall_d)
                via.append(wall_m)
                same = same and (out_d, err_d) == (out_m, err_m)
            med_d, med_m = statistics.median(direct), statistics.median(via)
            cells = [f"{statistics.median(w):.2f} ({min(w):.2f}-{max(w):.2f})" for w in (direct, via)]
            print(f"{fmt:6} {cells[0]:>24} {cells[1]:>24} {med_m / med_d:6.1f}x  {'yes' if same else 'NO'}")
        print(f"load average after: {_load()} (median, and range min-max, of wall seconds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
