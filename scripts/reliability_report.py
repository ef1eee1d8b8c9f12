"""``python scripts/reliability_report.py [--input JSON] [--load JSON] [--output MD] [--check]``.

Writes ``docs/reliability.md`` from what the reliability tests recorded
(``test-artifacts/reliability.json``, written by ``tests/e2e/reliability/record.py`` as the tests of
``tests/e2e/reliability/test_reliability_*.py`` run) and, when present, the figures of the 200-trial load run
(``test-artifacts/load_200.json``, from ``python -m benchmarks.load_200 --json ...``).

Nothing in the page is typed by hand: every row is an outcome a test recorded, with the time it
was recorded. ``--check`` exits 1 when any recorded case failed, a trial was lost or an orphan was
found, and also when the outcomes cannot stand for one test run: no file, no case at all, a section
with no case, or a case left by another session (``--session ID``: the run ``make test`` just
made, which it names in ``AUTOTUNE_RELIABILITY_SESSION``; by default the newest session in the
file). With ``--check`` the page is written only when ``--output`` is given, so a CI run leaves the
checkout as it was.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INPUT = REPO / "test-artifacts" / "reliability.json"
DEFAULT_LOAD = REPO / "test-artifacts" / "load_200.json"
DEFAULT_OUTPUT = REPO / "docs" / "reliability.md"

sys.path.insert(0, str(REPO))
from tests.e2e.reliability.record import SECTIONS  # noqa: E402  (every section a full run records)


def _cell(value: Any) -> str:
    """A value as one Markdown table cell."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "**NO**"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) or "none"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def _short(text: Any, n: int = 140) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= n else text[: n - 3] + "..."


def _ok(entry: dict[str, Any]) -> str:
    return "ok" if entry.get("ok") else "**FAILED**"


def totals(doc: dict[str, Any], load: dict[str, Any] | None) -> dict[str, Any]:
    """The headline numbers: cases tried and passed per section, trials lost, orphans found."""
    sections = doc.get("sections", {})
    out: dict[str, Any] = {}
    for name in ("placement", "faults", "interrupts", "tracking", "bad_inputs", "load"):
        entries = sections.get(name, {})
        out[name] = (sum(1 for e in entries.values() if e.get("ok")), len(entries))
    searches = sections.get("searches", {}).values()
    out["trials_lost"] = sum(int(e.get("lost") or 0) for e in searches)
    out["orphans"] = sum(int(e.get("orphans") or 0) for e in searches)
    out["trials_planned"] = sum(int(e.get("planned") or 0) for e in searches)
    if load is not None:
        out["trials_lost"] += int(load.get("trials_lost") or 0)
        out["trials_planned"] += int(load.get("trials_planned") or 0)
    out["all_ok"] = (all(ok == n for ok, n in (out[s] for s in ("placement", "faults", "interrupts", "tracking",
                                                                "bad_inputs", "load")))
                     and all(e.get("ok") for e in searches) and out["trials_lost"] == 0
                     and out["orphans"] == 0
                     and (load is None or (load.get("trials_lost") == 0 and load.get("gpu_overlaps") == 0)))
    return out


def staleness(doc: dict[str, Any], *, session: str | None = None) -> list[str]:
    """Why the outcomes do not stand for one complete run, one line each (empty when they do).

    Args:
        doc: The recorded outcomes.
        session: The run they must all come from; None: the newest session in ``doc``.
    """
    sections = doc.get("sections") or {}
    entries = [(name, case, e) for name, cases in sections.items() for case, e in cases.items()]
    if not entries:
        return ["no case is recorded: the reliability tests did not run"]
    if session is None:
        newest = max(entries, key=lambda t: str(t[2].get("recorded_at") or ""))
        session = newest[2].get("session")
    problems = [f"section {name!r} has no recorded case" for name in SECTIONS if not sections.get(name)]
    old = [f"{name}: {case!r} (session {e.get('session')}, {e.get('recorded_at')})"
           for name, case, e in entries if e.get("session") != session]
    if old:
        problems.append(f"{len(old)} case(s) left by another session than {session}, so not re-run: "
                        + "; ".join(old[:5]) + ("; ..." if len(old) > 5 else ""))
    return problems


_TRACKING_COLUMNS = ("ray trials", "mlflow trial runs", "lost", "re-run trials", "optuna disagrees with ray",
                     "duplicates", "running runs",
                     "orphans", "tracebacks on console", "unsynced at the end")


def _tracking(cases: dict[str, Any]) -> list[str]:
    """The tracking faults: one row per case, then each case's other facts."""
    if not cases:
        return []
    lines = ["## Tracking faults", "",
             ("Every MLflow write of a search is spooled under its run folder (`tracking/spool.jsonl`, "
              "fsync'd) and replayed in order and idempotently; nothing from tracking reaches Ray. "
              "Each case is a CLI search with a real store: a real `mlflow server` (its own process "
              "group, killed by its id) or sqlite on a real 16 MiB tmpfs. Required: every Ray trial has "
              "one MLflow trial run holding Ray's value, Optuna's study agrees with Ray, no trial "
              "re-run, no duplicate, nothing left RUNNING, no orphan, no traceback on the console, "
              "nothing unsynced after the search's own replay or `autotune sync`. A driver killed on "
              "purpose (or a node lost) leaves trials Ray runs again"
              " (on `--resume`, or elsewhere): there the re-run is a second attempt, kept beside the first."
              " \"unsynced at the end\" is what the search's own summary reported; where the store stayed"
              " down to the end, `autotune sync` then wrote every record (its exit code is in the facts)."
              " A tracking server that never answered, from the search's first second, is no bad input:"
              " the search run's start is spooled too, and the sync makes the experiment and the search run"
              " before the trial runs under it; if the server answers while the search still runs, the"
              " search's own replay does it, with no sync. Where a server comes back mid-search, the driver"
              " is paused (SIGSTOP) while it starts, so that results are certainly still to come when it"
              " answers: \"result rows before it answered\" below the trials planned shows the replay came"
              " with a trial's result, not only at the search's end."), ""]
    lines += _table(["case", *_TRACKING_COLUMNS, "result"],
                    [[name, *(_cell(e.get(c)) for c in _TRACKING_COLUMNS), _ok(e)] for name, e in cases.items()])
    for name, e in cases.items():
        rest = {k: v for k, v in e.items()
                if k not in (*_TRACKING_COLUMNS, "ok", "session", "recorded_at", "test")}
        lines += [f"**{name}**: " + "; ".join(f"{k} {_cell(v)}" for k, v in rest.items()), ""]
    return lines


def render(doc: dict[str, Any], load: dict[str, Any] | None, *, input_name: str,
           load_name: str | None) -> str:
    """The Markdown page."""
    sections = doc.get("sections", {})
    t = totals(doc, load)
    sessions = sorted({e.get("session") for s in sections.values() for e in s.values()} - {None})
    lines = [
        "# Reliability and scale",
        "",
        "<!-- Generated by scripts/reliability_report.py; do not edit by hand. -->",
        "",
        f"Generated by `python scripts/reliability_report.py` from `{input_name}` (written by "
        "`tests/e2e/reliability/test_reliability_*.py` as they run; see `tests/e2e/reliability/record.py`)"
        + (f" and `{load_name}` (written by `python -m benchmarks.load_200 --json ...`)." if load_name
           else "; no 200-trial load figures were found.")
        + f" Test sessions: {', '.join(sessions) or 'none'}; last update {doc.get('updated_at', 'n/a')}.",
        "",
        ("Every search in these tests is real: `python -m autotune.search` as a subprocess, real Ray "
        "(embedded, or a local multi-node `ray.cluster_utils.Cluster`), real emulator servers on "
        "127.0.0.1, a real MLflow store. Leftovers are looked for by pid: every process a test "
        "starts carries an environment token, and ports and per-GPU `flock`s are probed directly."),
        "",
        ("To make this page again: `make test` runs `tests/e2e/reliability/test_reliability_*.py` within the whole "
        "suite (20 min 29 s and 21 min 52 s of pytest on two workers in two clean-clone runs, "
        "2026-12-02, load average 3-5.5 when sampled), or "
        "`.venv/bin/pytest tests/e2e/reliability/test_reliability_*.py` alone (22 tests in one process: "
        "20 min 21 s on two shared cores at load average 3-6; at load average 12-20 a run took 34 min "
        "and Ray's start-up or a CLI's 120 s limit could time out); "
        "`.venv/bin/python -m benchmarks.load_200 --json test-artifacts/load_200.json` (the 200-trial "
        "run, 1238 s on two cores); then `.venv/bin/python scripts/reliability_report.py --input "
        "RESULTS --load LOAD` (add `--check` to fail on any failed case, lost trial or orphan). The "
        "two files this page was made from are committed beside the other measurements, and the "
        "page is made again from them by the same command."),
        "",
        "## Summary",
        "",
    ]
    lines += _table(["what", "result"], [
        ["placement checks passed", f"{t['placement'][0]} of {t['placement'][1]}"],
        ["faults injected and survived", f"{t['faults'][0]} of {t['faults'][1]}"],
        ["driver interrupts and kills survived", f"{t['interrupts'][0]} of {t['interrupts'][1]}"],
        ["tracking faults survived (MLflow server down from the start, back mid-search or not, or killed; "
         "full disk; driver killed mid-write; node lost)",
         f"{t['tracking'][0]} of {t['tracking'][1]}"],
        ["bad inputs refused cleanly (exit 2, one error, nothing started)",
         f"{t['bad_inputs'][0]} of {t['bad_inputs'][1]}"],
        ["load checks passed", f"{t['load'][0]} of {t['load'][1]}"],
        ["trials planned across all searches", t["trials_planned"]],
        ["trials lost (must be 0)", t["trials_lost"]],
        ["orphans found: servers, watchdogs, ports, GPU locks (must be 0)", t["orphans"]],
        ["everything as required", t["all_ok"]],
    ])

    placement = sections.get("placement", {})
    if placement:
        lines += ["## Multi-node placement", "",
                  ("A local Ray cluster of three raylets (head 0 GPUs, `gpu8` 8 GPUs, `gpu4` 4 GPUs; "
                  "GPU nodes declare `autotune_node: 1`). Each node's raylet gets its own "
                  "`AUTOTUNE_SIM_GPU_LOCK_DIR` (logical GPU ids are per node, so the emulator's "
                  "per-GPU locks must be too); workers and their servers inherit it, so each usage "
                  "record names the node its server ran on. Each server's node is checked against "
                  "the node Ray ran the trial's actor on (GCS actor table)."), ""]
        for name, e in placement.items():
            facts = {k: v for k, v in e.items() if k not in ("ok", "session", "recorded_at", "test")}
            lines += [f"**{name}**: {_ok(e)} (recorded {e.get('recorded_at')})", ""]
            lines += _table(["fact", "value"], [[k.replace("_", " "), v] for k, v in facts.items()])

    faults = sections.get("faults", {})
    if faults:
        lines += ["## Faults injected", "",
                  ("One search; `AUTOTUNE_SIM_FAULT` is a categorical parameter (`null` = no fault) "
                  "on tp 2, and tp 1 has no fault but a profile whose weights do not fit one GPU. "
                  "`measure.startup_timeout_s` 15 s, `measure.trial_timeout_s` 20 s."), ""]
        rows = []
        for name, e in faults.items():
            if "checks" not in e:
                continue
            checks = e.get("checks") or {}
            rows.append([name, e.get("status"), _short(e.get("reason"), 100),
                         checks.get("log_tail_in_mlflow"), checks.get("mlflow_run_ended"),
                         e.get("duration_s"), _ok(e)])
        lines += _table(["case", "trial status", "reason", "log tail in MLflow", "run ended",
                         "seconds", "result"], rows)
        for name, e in faults.items():
            if "checks" not in e:
                lines += [(f"**{name}**: {_ok(e)}: servers left {e.get('servers')}, ports held "
                          f"{_cell(e.get('ports'))}, GPU locks held {_cell(e.get('gpu_locks'))}."), ""]

    interrupts = sections.get("interrupts", {})
    if interrupts:
        lines += ["## Driver interrupts and killed workers", ""]
        for name, e in interrupts.items():
            facts = {k: v for k, v in e.items() if k not in ("ok", "session", "recorded_at", "test")}
            lines += [f"**{name}**: {_ok(e)}: " + "; ".join(
                f"{k.replace('_', ' ')} {_cell(v)}" for k, v in facts.items()), ""]

    lines += _tracking(sections.get("tracking", {}))

    bad = sections.get("bad_inputs", {})
    if bad:
        lines += ["## Bad input", "",
                  ("Each through the CLI as a subprocess. Required: exit code 2, exactly one "
                  "`error:` line, no traceback, nothing started (no search header, no server log, "
                  "no process with the test's token)."), ""]
        lines += _table(["input", "exit", "error (shortened)", "result"],
                        [[name, e.get("exit_code"), _short(e.get("message"), 160), _ok(e)]
                         for name, e in sorted(bad.items())])

    searches = sections.get("searches", {})
    if searches:
        lines += ["## Trials accounted for", ""]
        lines += _table(["search", "planned", "finished", "failed (by design)", "lost", "orphans",
                         "result"],
                        [[name, e.get("planned"), e.get("completed"), e.get("failed"), e.get("lost"),
                          e.get("orphans"), _ok(e)] for name, e in searches.items()])

    lines += ["## Load", ""]
    for name, e in sections.get("load", {}).items():
        lines += [f"**{name}** (test suite): {_ok(e)}: " + "; ".join(
            f"{k.replace('_', ' ')} {_cell(v)}" for k, v in e.items()
            if k not in ("ok", "session", "recorded_at", "test")), ""]
    if load is None:
        lines += [("No 200-trial figures: run `python -m benchmarks.load_200 --json "
                  "test-artifacts/load_200.json`, then this script again."), ""]
    else:
        o = load.get("overhead_s", {})
        lines += [f"**{load.get('trials_planned')}-trial search** at concurrency "
                  f"{load.get('concurrency')}: {load.get('machine')}. Profile "
                  f"`{Path(str(load.get('profile'))).name}` (forwards cost nothing), workload "
                  f"`{json.dumps(load.get('workload'))}`, one repeat; nodes "
                  + ", ".join(f"{n['name']} ({n['gpus']} GPUs)" for n in load.get("nodes", []))
                  + ".", ""]
        lines += _table(["figure", "value"], [
            ["trials finished / planned", f"{load.get('trials_finished')} / {load.get('trials_planned')}"],
            ["trials lost", load.get("trials_lost")],
            ["trials failed", load.get("trials_failed")],
            ["GPUs held by two servers at once", load.get("gpu_overlaps")],
            ["wall time (s)", load.get("wall_s")],
            ["trials per minute", load.get("trials_per_min")],
            ["driver RSS at start, before Ray and MLflow load (MiB)", load.get("rss_mb_before")],
            ["driver RSS at the first finished trial (MiB)", load.get("rss_mb_at_first_trial")],
            ["driver RSS peak (MiB)", load.get("rss_mb_peak")],
            ["driver RSS after the search's end: finalists, summary plots (MiB)", load.get("rss_mb_end")],
            ["driver RSS growth while trials finish (MiB per 100 trials)",
             load.get("rss_mb_growth_per_100_trials")],
            ["tuner overhead per trial, median (s)", o.get("median")],
            ["tuner overhead per trial, p90 (s)", o.get("p90")],
            ["tuner overhead per trial, max (s)", o.get("max")],
            ["median overhead, first quarter of trials (s)", o.get("median_first_quarter")],
            ["median overhead, last quarter of trials (s)", o.get("median_last_quarter")],
        ])
        samples = load.get("rss_samples") or []
        step = max(1, len(samples) // 12)
        picked = samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else [])
        lines += ["Driver RSS over time:", ""]
        lines += _table(["seconds", "trials done", "RSS (MiB)"], [list(s) for s in picked])
        lines += [("Tuner overhead is the search's own figure (`SearchOutcome.overheads_s`): for each "
                  "trial, the time from its slot being free to the end of its bookkeeping (MLflow "
                  "included), minus the seconds the trial itself measured."), ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/reliability_report.py",
                                     description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("--input", default=str(DEFAULT_INPUT), help="outcomes the tests recorded")
    parser.add_argument("--load", default=str(DEFAULT_LOAD),
                        help="figures of the 200-trial load run (skipped if missing)")
    parser.add_argument("--output", help=f"the Markdown page to write (default {DEFAULT_OUTPUT.relative_to(REPO)}; "
                                          "with --check, none unless given)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a case failed, a trial was lost or an orphan was found, or the "
                             "outcomes are empty or stale")
    parser.add_argument("--session", help="with --check: the test session every case must come from "
                                          "(default: the newest in the file)")
    args = parser.parse_args(argv)
    source = Path(args.input)
    if not source.exists():
        print(f"error: {source} does not exist; run the reliability tests first "
              "(pytest tests/e2e/reliability/test_reliability_*.py)", file=sys.stderr)
        return 2
    try:
        doc = json.loads(source.read_text())
        load_path = Path(args.load)
        load = json.loads(load_path.read_text()) if load_path.exists() else None
    except ValueError as exc:
        print(f"error: cannot read the outcomes: {exc}", file=sys.stderr)
        return 2

    def shown(p: Path | None) -> str | None:
        if p is None:
            return None
        try:
            return str(p.resolve().relative_to(REPO))
        except ValueError:
            return str(p)

    t = totals(doc, load)
    output = args.output or (None if args.check else str(DEFAULT_OUTPUT))
    if output is not None:
        page = render(doc, load, input_name=shown(source) or "", load_name=shown(load_path) if load else None)
        out = Path(output)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page)
    print(f"{f'wrote {output}' if output else f'checked {shown(source)}'}: trials lost {t['trials_lost']}, "
          f"orphans {t['orphans']}, everything as required: {t['all_ok']}")
    if not args.check:
        return 0
    problems = staleness(doc, session=args.session)
    for line in problems:
        print(f"error: {shown(source)}: {line}", file=sys.stderr)
    return 0 if (t["all_ok"] and not problems) else 1


if __name__ == "__main__":
    sys.exit(main())
