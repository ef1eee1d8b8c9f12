"""Can this checkout resume a GPU plan's Ray state? Checked here, before GPU time is spent on it.

Usage (here, from the repo root):
    python scripts/gpu/check_state.py STATE     (a folder with mlruns.tar.gz or mlruns.tar.xz,
                                                 or an unpacked folder holding mlruns/ray/)

``python -m autotune.search --resume`` restores Ray Tune's pickled experiment (``tuner.pkl``) and the
searcher's state (``searcher-state-*.pkl``, which holds the Optuna study, the sampler and the
search space). Pickles name this package's modules and classes, and hold the instance attributes
of the code that wrote them. The fourth GPU run found out on the remote host that a re-layout had
made the third run's state unloadable. This loads every pickle of every search in STATE with
this checkout's code, and compares each pickled search space, and the searcher's sampler, with
the same made afresh (an attribute the code now has and the pickle lacks would fail mid-search,
not at load).

Exit 0: every search can be restored; 1: one cannot (what and why on stderr); 2: bad input.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def ray_root(state: Path, scratch: Path) -> Path:
    """The ``mlruns/ray`` folder of ``state``, unpacking its mlruns archive into ``scratch``."""
    if (state / "mlruns" / "ray").is_dir():
        return state / "mlruns" / "ray"
    for name, flag in (("mlruns.tar.gz", "-xzf"), ("mlruns.tar.xz", "-xJf"), ("call3-mlruns.tar.xz", "-xJf")):
        if (state / name).is_file():
            subprocess.run(["tar", flag, str(state / name), "-C", str(scratch)], check=True)
            if (scratch / "mlruns" / "ray").is_dir():
                return scratch / "mlruns" / "ray"
    raise FileNotFoundError(f"{state}: no mlruns/ray folder and no mlruns.tar.gz or mlruns.tar.xz with one")


def spaces_in(obj: Any, *, depth: int = 0, seen: set[int] | None = None) -> list[Any]:
    """Every ``SearchSpace`` reachable from ``obj`` (dicts, sequences and instance attributes)."""
    from autotune.space.search_space import SearchSpace

    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 8:
        return []
    seen.add(id(obj))
    if isinstance(obj, SearchSpace):
        return [obj]
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple, set)):
        children = list(obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = list(vars(obj).values())
    else:
        return []
    return [s for c in children for s in spaces_in(c, depth=depth + 1, seen=seen)]


def _sampler_problems(label: str, obj: Any, space: Any) -> list[str]:
    """The pickled sampler against one this checkout makes for the same space: an attribute the
    code now sets in ``__init__`` and the pickle lacks would fail at the first resumed proposal."""
    pickled = obj.get("_sampler") if isinstance(obj, dict) else None
    if pickled is None or not hasattr(pickled, "__dict__"):
        return []
    from autotune.search.samplers import make_sampler

    fresh = make_sampler(space.search.sampler, seed=0, space=space)
    if type(fresh) is not type(pickled):
        return [f"{label}: its sampler is a {type(pickled).__name__}, this checkout makes a "
                f"{type(fresh).__name__} for {space.name!r}"]
    missing = sorted(set(vars(fresh)) - set(vars(pickled)))
    return [f"{label}: its {type(pickled).__name__} lacks {', '.join(missing)}, which this checkout's "
            "sets"] if missing else []


def check_run(run: Path) -> list[str]:
    """Problems restoring one search run folder (``mlruns/ray/<name>/run-*``); empty when none."""
    import ray.cloudpickle as cloudpickle

    from autotune.space.search_space import load_space

    problems: list[str] = []
    pickles = sorted(run.glob("tuner.pkl")) + sorted(run.glob("searcher-state-*.pkl"))
    if not pickles:
        return [f"{run}: no tuner.pkl or searcher-state-*.pkl (not a search Ray can restore)"]
    for path in pickles:
        try:
            with open(path, "rb") as fh:
                obj = cloudpickle.load(fh)
        except Exception as exc:  # any failure to unpickle is the finding, whatever its type
            problems.append(f"{path.name}: cannot be loaded by this checkout: {type(exc).__name__}: {exc}")
            continue
        for space in spaces_in(obj):
            shipped = REPO / "scripts" / "gpu" / f"{space.name}.yaml"
            if not shipped.is_file():
                continue  # not a shipped GPU space: nothing to compare with
            fresh = load_space(str(shipped))
            missing = sorted(set(vars(fresh)) - set(vars(space)))
            if missing:
                problems.append(f"{path.name}: its search space {space.name!r} lacks {', '.join(missing)}, "
                                "which this checkout's SearchSpace has")
            problems += _sampler_problems(path.name, obj, fresh)
            if fresh.count() != space.count():
                problems.append(f"{path.name}: {space.name!r} has {space.count()} configs pickled, "
                                f"{fresh.count()} in {shipped.relative_to(REPO)} now: the space file changed")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("state", help="folder with mlruns.tar.gz / mlruns.tar.xz, or with mlruns/ray/")
    args = parser.parse_args(argv)
    state = Path(args.state)
    if not state.is_dir():
        print(f"error: {state}: not a folder", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="check-state-") as tmp:
        try:
            root = ray_root(state, Path(tmp))
        except (FileNotFoundError, subprocess.CalledProcessError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        runs = sorted(p for p in root.glob("*/run-*") if p.is_dir())
        if not runs:
            print(f"error: {state}: mlruns/ray holds no search run (run-*)", file=sys.stderr)
            return 2
        bad = 0
        for run in runs:
            problems = check_run(run)
            label = f"{run.parent.name}/{run.name}"
            if problems:
                bad += 1
                print(f"{label}: cannot be resumed", file=sys.stderr)
                for p in problems:
                    print(f"  {p}", file=sys.stderr)
            else:
                print(f"{label}: restorable by this checkout")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
