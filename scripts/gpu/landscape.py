"""Collect trial JSON files into a recorded landscape, then check it against its space.

Usage (from the repo root):
    python3 scripts/gpu/landscape.py --space SPACE --out FILE [--description TEXT]
        [--acceptance TEXT] [--dedupe] [--drop-rejected] [--root PATH=NAME] TRIAL_JSON [...]

Each TRIAL_JSON is the stdout of ``python -m autotune.trial --space SPACE --params ... --json``
(speculative configs and every group's baseline, ``{"speculative_algorithm": null, ...}``; one
``--baseline-store DIR`` for the whole sweep measures each baseline once). Empty or non-JSON files
are skipped with a warning. The landscape is written to FILE (its ``space`` relative to FILE's
folder), then loaded back with :func:`benchmarks.search.landscape.load_landscape`; when that fails (a config
without a record, a record the space rejects, ...) the error and the configs still to sweep are
printed and the exit status is 1, the file written all the same. Replay it with
``python -m autotune.bench_search --landscape FILE``.

``--dedupe`` keeps one record per config: the first in the order given that did not fail, else the
first. A search re-measures configs (a finalist, its fresh baseline), and a landscape holds one
record each; the ones left out are counted in the output. ``--drop-rejected`` leaves out records
whose config the space now rejects (a sweep older than one of its rules), naming each one.

Paths under this checkout are written relative to it, and ``--root PATH=NAME`` (repeatable) writes
the measuring machine's other folders as ``NAME/...``: a committed landscape names no machine's
folders.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
try:
    import autotune  # noqa: F401
    import benchmarks.search  # noqa: F401
except ImportError:  # the benchmarks live beside the package, in the checkout only (and maybe autotune too)
    sys.path.insert(0, str(REPO))

from autotune.errors import ConfigError  # noqa: E402
from autotune.space.trial_config import config_key  # noqa: E402
from autotune.trial.report import portable_paths  # noqa: E402
from benchmarks.search.landscape import FORMAT, canonical, load_landscape, missing_configs  # noqa: E402


def read_trial(path: str) -> dict[str, Any] | None:
    """The trial JSON object in a file (the whole file, else its last line), or None."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"warning: {path}: skipped, cannot read it: {exc}", file=sys.stderr)
        return None
    if not text:
        print(f"warning: {path}: skipped, empty (did the trial crash before printing?)",
              file=sys.stderr)
        return None
    for candidate in (text, text.splitlines()[-1]):
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    print(f"warning: {path}: skipped, not a trial JSON object", file=sys.stderr)
    return None


def common_acceptance(records: list[dict[str, Any]]) -> str | None:
    """What the records say about acceptance (their ``acceptance`` field), if anything."""
    seen = sorted({str(r["acceptance"]) for r in records if r.get("acceptance") is not None})
    if not seen:
        return None
    return seen[0] if len(seen) == 1 else "mixed: " + ", ".join(seen)


def still_to_sweep(space_path: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Configs (and group baselines) of the space that no valid record covers."""
    from autotune.space.search_space import load_space

    space = load_space(space_path)
    covered = {}
    for rec in records:
        params = rec.get("params")
        if isinstance(params, dict):
            resolved, why = canonical(space, params)
            if why is None:
                covered[config_key(resolved)] = True
    configs, baselines = missing_configs(space, covered)
    return configs + baselines


def dedupe(space_path: str, records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """One record per config (first non-failed, else first), and how many were dropped."""
    from autotune.space.search_space import load_space

    space = load_space(space_path)
    chosen: dict[Any, dict[str, Any]] = {}
    order: list[Any] = []
    loose = []
    for rec in records:
        params = rec.get("params")
        resolved, why = canonical(space, params) if isinstance(params, dict) else ({}, "no params")
        if why is not None:
            loose.append(rec)  # load_landscape names what is wrong with it
            continue
        key = config_key(resolved)
        if key not in chosen:
            chosen[key] = rec
            order.append(key)
        elif chosen[key].get("status") == "failed" and rec.get("status") != "failed":
            chosen[key] = rec
    kept = [chosen[k] for k in order] + loose
    return kept, len(records) - len(kept)


def drop_rejected(space_path: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records whose config the space accepts; each one left out is printed with the reason.

    For a sweep made before the space learnt a rule (configs SGLang crashed on, say): the
    landscape then stands for the space as it is now, and says what it left out.
    """
    from autotune.space.search_space import load_space

    space = load_space(space_path)
    kept = []
    for rec in records:
        params = rec.get("params")
        resolved, why = canonical(space, params) if isinstance(params, dict) else (None, "no params")
        if why is not None and isinstance(params, dict):
            print(f"--drop-rejected: left out {json.dumps(params)} ({rec.get('status')}): {why}")
            continue
        kept.append(rec)
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--space", required=True, help="the space the trials were measured in")
    parser.add_argument("--out", required=True, help="landscape JSON to write")
    parser.add_argument("--description", default="",
                        help="free text: machine, SGLang version, workload")
    parser.add_argument("--acceptance",
                        help="how acceptance came about (default: the records' own field)")
    parser.add_argument("--dedupe", action="store_true",
                        help="keep one record per config (the first that did not fail)")
    parser.add_argument("--drop-rejected", action="store_true",
                        help="leave out (and name) records whose config the space rejects")
    parser.add_argument("--root", action="append", default=[], metavar="PATH=NAME",
                        help="write paths under PATH (the measuring machine's folder) as NAME/...; "
                             "paths under this checkout are always written relative to it")
    parser.add_argument("trials", nargs="+", metavar="TRIAL_JSON")
    args = parser.parse_args(argv)
    roots = {str(REPO): ""}
    for item in args.root:
        path, sep, name = item.partition("=")
        if not sep or not path.startswith("/") or not name:
            parser.error(f"--root {item!r}: expected an absolute PATH=NAME, e.g. /tmp/autotune-gpu=<results>")
        roots[path] = name
    # A committed landscape names no machine's folders (a record's launch command, its log).
    records = [portable_paths(r, roots) for r in (read_trial(p) for p in args.trials) if r is not None]
    if args.drop_rejected:
        records = drop_rejected(args.space, records)
    if args.dedupe:
        records, dropped = dedupe(args.space, records)
        print(f"--dedupe: {dropped} repeated record(s) left out")
    out = Path(args.out)
    space_ref = os.path.relpath(os.path.abspath(args.space), os.path.abspath(out.parent or "."))
    doc = {"format": FORMAT, "space": Path(space_ref).as_posix(),
           "description": args.description,
           "acceptance": args.acceptance or common_acceptance(records), "records": records}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(records)} records of {len(args.trials)} files")
    try:
        land = load_landscape(out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        try:
            todo = still_to_sweep(args.space, records)
        except ConfigError:
            todo = []
        if todo:
            print(f"{len(todo)} configs still to sweep (each: python -m autotune.trial --space "
                  f"{args.space} --params JSON --json):", file=sys.stderr)
            for params in todo:
                print("  " + json.dumps(params), file=sys.stderr)
        return 1
    print(f"ok: covers all {len(land.entries)} configs and baselines of {land.space_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
