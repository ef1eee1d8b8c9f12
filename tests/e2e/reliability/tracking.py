"""What the tracking-fault tests share: the fault's search started as a user would, and the facts
every case asserts about what it left (Ray's trials, Optuna's study, the MLflow store, leftovers).

Kept here, not in one test module, because the cases live in two modules
(``test_reliability_tracking.py`` and ``test_reliability_tracking_back.py``).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from autotune.figures import shown
from autotune.search.trial_report import TrialReport
from tests.e2e.reliability.procs import leftovers
from tests.e2e.reliability.searchrun import SearchDir, start_cli
from tests.e2e.reliability.spaces import base_space, merged, write_space

#: A result row of the live table: its number, then the trial id's first eight characters.
ROW = re.compile(r"^\s*\d+ ([0-9a-f]{8})\s", re.MULTILINE)


def fault_space(tmp: Path, name: str, token: str, *, trials: int, start_s: float = 2) -> Path:
    """A small EAGLE3 space (16 points) whose servers each take ``start_s`` seconds to start."""
    space = merged(base_space(name, token=token),
                   fixed_env={"AUTOTUNE_SIM_FAULT": f"slow_start:{start_s:g}"},
                   fixed_args={"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1},
                   parameters={"speculative_num_steps": {"type": "int", "low": 1, "high": 4},
                               "speculative_num_draft_tokens": {"type": "int", "low": 2, "high": 5}},
                   budget={"trials": trials}, search={"seed": 11, "max_concurrent": 2})
    return write_space(tmp, space)


def start_search(tmp: Path, name: str, token: str, *cli: str, trials: int, start_s: float = 2,
                 summary: bool = True) -> tuple[Path, SearchDir, Path, subprocess.Popen]:
    """The fault's search started as a user would: ``(space file, its folder, console log, driver)``.

    Args:
        tmp: The search's root (``mlruns/`` goes there) and where its files are written.
        name: The search name.
        token: The test's process token.
        *cli: More arguments of ``python -m autotune.search``.
        trials: The trial budget.
        start_s: Each emulator server's start-up time.
        summary: Write the summary JSON to ``<tmp>/s.json``.
    """
    path = fault_space(tmp, name, token, trials=trials, start_s=start_s)
    log = tmp / "search.log"
    extra = ("--summary-json", str(tmp / "s.json")) if summary else ()
    driver = start_cli(path, *cli, *extra, root=tmp, token=token, log=log)
    return path, SearchDir(tmp, name), log, driver


def rows(log: Path) -> int:
    """How many result rows the live table has printed so far."""
    return len(ROW.findall(log.read_text(errors="replace"))) if log.exists() else 0


def check(search: SearchDir, uri: str | None, token: str, console: str, trials: int) -> dict:
    """What every case asserts, as facts (recorded before the test asserts them)."""
    ray_results = search.trial_results()
    reports = {}
    for run in search.run_dirs():
        for path in run.glob("trainable_*/result.json"):
            lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
            reports[json.loads(lines[-1])["trial_id"]] = len(lines)
    view = search.mlflow_view(uri)
    runs = {r.trial_id: r for r in view["trial_runs"]}
    disagree = []
    for tid, result in ray_results.items():
        measured = TrialReport.from_metrics(result)
        run = runs.get(tid)
        ray_value = measured.result.output_tok_s if measured and measured.result else None
        # MLflow keeps figures at 4 significant digits (autotune.figures.shown): compare so.
        if run is None or run.output_tok_s != (shown(ray_value) if ray_value is not None else None):
            disagree.append(f"{tid}: Ray {ray_value} vs MLflow {run.output_tok_s if run else 'no run'}")
    left = leftovers(token, log_dir=search.ray_root, lock_dirs=[])
    return {
        "trials planned": trials, "ray trials": len(ray_results),
        "mlflow trial runs": len(runs), "lost": sorted(set(ray_results) - set(runs)),
        "re-run trials": sorted(t for t, n in reports.items() if n != 1),
        "attempts other than 1": sorted(t for t, r in runs.items() if r.tags.get("autotune.attempt") != "1"),
        "ray and mlflow disagree": disagree, "optuna disagrees with ray": search.optuna_mismatches(),
        "duplicates": view["duplicate_trial_ids"],
        "running runs": view["running"], "parent runs": [s for _, s in view["parents"]],
        "orphans": left.count, "left behind": left.describe() if left.count else "nothing",
        "seconds until nothing left": round(left.waited_s, 1),
        "tracebacks on console": console.count("Traceback"),
        "error stopping trial": console.count("Error stopping trial"),
        # MLflow prints these for every run it ends on a tracking server, into the live table.
        "mlflow view-run prints": console.count("View run"),
    }


_EMPTY_FACTS = ("lost", "re-run trials", "attempts other than 1", "ray and mlflow disagree",
                "optuna disagrees with ray", "duplicates", "running runs", "orphans",
                "tracebacks on console", "error stopping trial", "mlflow view-run prints")


def unclean(facts: dict, *, reruns: bool = False) -> list[str]:
    """The facts not as required (empty: every one is); ``reruns``: a killed driver's unfinished
    trials may run again."""
    bad = [] if facts["ray trials"] == facts["trials planned"] == facts["mlflow trial runs"] else [
        "trials planned", "ray trials", "mlflow trial runs"]
    skipped = ("re-run trials", "attempts other than 1") if reruns else ()
    bad += [k for k in _EMPTY_FACTS if k not in skipped and facts[k]]
    if facts["parent runs"] != ["FINISHED"]:
        bad.append("parent runs")
    return bad


def clean(facts: dict, *, reruns: bool = False) -> bool:
    """Every fact as required; ``reruns``: a killed driver's unfinished trials may run again."""
    return not unclean(facts, reruns=reruns)


def format_facts(facts: dict, *, reruns: bool = False) -> str:
    """Every fact, one a line and whole, those not as required first and marked: the message of a
    failed ``assert clean(facts)`` (pytest's own truncation is off too, see pyproject.toml)."""
    bad = unclean(facts, reruns=reruns)
    order = bad + [k for k in facts if k not in bad]
    return "facts not as required: " + (", ".join(bad) or "none") + "\n" + "\n".join(
        f"{'!! ' if k in bad else '   '}{k}: {facts[k]!r}" for k in order)


#: The console line of a search's replay that MLflow took after failing (DurableTracker.drain).
#: Matched whole: the line about the failure says "written when it answers again" too.
ANSWERED = re.compile(r"^tracking: MLflow at \S+ answers again; (\d+) spooled record\(s\) written$")


def answered_again(lines: list[str]) -> int | None:
    """The index of the first console line saying MLflow answers again, None if none does."""
    return next((i for i, ln in enumerate(lines) if ANSWERED.match(ln)), None)
