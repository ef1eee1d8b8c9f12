"""What a search prints at its end: the winner, its phases, and how to browse and export it.

:func:`print_summary` is the report ``python -m autotune.search`` ends with; :func:`browse_hint`
says how to open the trials in MLflow's UI; :func:`num` is how every console figure of the search
is written (``-`` for unknown, never a made-up 0).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from autotune.figures import finite
from autotune.search.gpu_bill import bill_lines
from autotune.search.options import SearchOutcome
from autotune.space.warm_start import versus_default
from autotune.tracking.ui_links import run_url, runs_url
from autotune.trial.gpu_time import GpuTotals
from autotune.trial.level_results import LoadLevel
from autotune.trial.report import phase_table
from autotune.trial.result import TrialResult


def num(value: Any, spec: str) -> str:
    """A figure for the console: "-" when it is unknown, never a made-up 0."""
    v = finite(value)
    return "-" if v is None else format(v, spec)


def _bin_dir() -> str:
    """Prefix that runs this environment's tools: ``.venv/bin/`` after ``make demo``, else ''."""
    bindir = Path(sys.executable).parent
    if (bindir / "mlflow").exists():
        try:
            return str(bindir.relative_to(Path.cwd())) + "/"
        except ValueError:
            return str(bindir) + "/"
    return ""


def browse_hint(tracking_uri: str, experiment_id: str | None, *, bindir: str = "",
                parent_run_id: str | None = None) -> list[str]:
    """How to see the trials: the runs table's URL and the search run's (for a local store the UI
    command first), each opening MLflow's training-runs screens (:mod:`autotune.tracking.ui_links`).

    A tracking server is its own UI (``mlflow ui --backend-store-uri http://...`` would be wrong).
    """
    server = tracking_uri.startswith(("http://", "https://"))
    base = tracking_uri.rstrip("/") if server else "http://127.0.0.1:5000"
    lines = [f"{bindir}mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1 --port 5000"] if not server else []
    if experiment_id:
        lines.append(runs_url(base, experiment_id))
        if parent_run_id:
            lines.append(run_url(base, experiment_id, parent_run_id))
    heads = ["Browse trials:  "] + (["  then open:     "] if not server else []) + ["  search run:    "]
    return [f"{head}{line}" for head, line in zip(heads, lines, strict=False)]


def print_summary(outcome: SearchOutcome, *, out: TextIO | None = None, space_file: str = "") -> None:
    """The end-of-search report: winner, baseline, speedup, accept vs break-even, phases."""
    out = sys.stdout if out is None else out  # the stream of the moment, not of import time

    s = outcome.summary()
    print("\n" + "=" * 78, file=out)
    if outcome.interrupted:
        print(f"Search {outcome.name!r} interrupted after {outcome.trials} trial(s).", file=out)
        _print_gpu_time(outcome, out)
        _print_unsynced(outcome, out)
        return
    print(f"Search {outcome.name!r}: {outcome.trials} trials ({outcome.counts()})", file=out)
    _print_gpu_time(outcome, out)
    _print_unsynced(outcome, out)
    if outcome.winner is None:
        print("No config ran successfully: nothing to recommend.", file=out)
        return
    w = TrialResult.from_dict(outcome.winner)
    if outcome.baseline_wins:
        print(f"{outcome.baseline_line()}. The winner is the BASELINE: serve without speculative "
              "decoding.", file=out)
    elif outcome.settled_by_evidence:
        print("Winner (the trials' evidence is decisive; not re-measured):", file=out)
    else:
        print("Winner (confirmed beside a fresh baseline" + ("; the runner-up is within the noise, "
              "either serves as well" if outcome.within_noise else "") + "):", file=out)
    print(f"  params: {json.dumps(w.params, default=str)}", file=out)
    if outcome.margin is not None:
        print(f"  {outcome.margin['line']}", file=out)
    if w.load_capped:
        print(f"  capped load: {w.load_note}", file=out)
    if w.load_comparison:
        print(f"  {w.load_comparison}", file=out)
    if outcome.sglang_default is not None:
        figures = {"output_tok_s": w.output_tok_s, "speedup": w.speedup}
        print(f"  {versus_default(outcome.sglang_default, winner=figures)}", file=out)
    print(phase_table(w), file=out)
    if outcome.per_level:
        print(f"\nBest config per {level_title(outcome.per_level)} (each judged against its "
              "baseline at that level):", file=out)
        for line in level_table(outcome.per_level):
            print(f"  {line}", file=out)
    if s.get("tuner_overhead_s_median") is not None:
        print(f"Tuner overhead per trial (median): {s['tuner_overhead_s_median']:.2f} s", file=out)

    if outcome.tracking_uri:
        print("\nNext steps:", file=out)
        bindir = _bin_dir()
        for line in browse_hint(outcome.tracking_uri, outcome.experiment_id, bindir=bindir,
                                parent_run_id=outcome.parent_run_id):
            print(f"  {line}", file=out)
        server = outcome.tracking_uri.startswith(("http://", "https://"))
        print(f"  Export winner:  {bindir}python -m autotune.export --name {outcome.name} "
              + (f"--tracking-uri {outcome.tracking_uri} " if server else "") + "--format sh", file=out)
    heading, command = serve_heading(w.serve_command, w.launch_command)
    print(f"\n{heading}:\n{command}", file=out, flush=True)


def _print_gpu_time(outcome: SearchOutcome, out: TextIO) -> None:
    """The search's GPU bill (:mod:`autotune.search.gpu_bill`), when it was counted."""
    if outcome.gpu_time is None:
        return
    unrecorded_trials = int(outcome.gpu_time.get("unrecorded_trials") or 0)
    for line in bill_lines(GpuTotals.from_dict(outcome.gpu_time), unrecorded_trials=unrecorded_trials):
        print(line, file=out)


def serve_heading(serve: str | None, measured: str | None) -> tuple[str, str | None]:
    """The winner's command and its heading: the one to serve with, else (a record written before
    trials kept it) the measured one, said to be that."""
    if serve:
        return "Launch command (to serve with; python -m autotune.export writes it checked by SGLang's parser)", serve
    return "Launch command as measured (python -m autotune.export writes the one to serve with)", measured


def level_title(per_level: Sequence[dict[str, Any]]) -> str:
    """``concurrency`` or ``request rate``: what the per-level rows' levels are."""
    return LoadLevel.of_record(per_level[0]).title if per_level else "concurrency"


def level_table(per_level: Sequence[dict[str, Any]]) -> list[str]:
    """The best config per load level as a Markdown table (``summary.md`` and the console)."""
    head = "request rate (req/s)" if level_title(per_level) == "request rate" else "concurrency"
    lines = [f"| {head} | best config | tok/s | baseline tok/s | speedup | break-even accept | why |",
             "|---|---|---|---|---|---|---|"]
    for row in per_level:
        level = LoadLevel.of_record(row)
        config = ("nothing feasible" if row.get("winner") is None
                  else config_label(row.get("params"), baseline=bool(row.get("is_baseline"))))
        if row.get("winner") is not None and not row.get("confirmed"):
            config += " (not confirmed)"
        lines.append(f"| {level.value:g} | {config} | {num(row.get('output_tok_s'), '.1f')} | "
                     f"{num(row.get('baseline_tok_s'), '.1f')} | {num(row.get('speedup'), '.3f')}x | "
                     f"{num(row.get('break_even_accept_length'), '.2f')} | {row.get('note')} |")
    return lines


_SHORT = {"speculative_algorithm": "algorithm", "speculative_num_steps": "steps",
          "speculative_eagle_topk": "topk", "speculative_num_draft_tokens": "draft_tokens"}


def config_label(params: dict[str, Any] | None, *, baseline: bool = False) -> str:
    """A config by its searched parameters (``algorithm=EAGLE3, steps=3, topk=1, draft_tokens=4``).
    ``params`` holds the searched ones only (a fixed algorithm is not among them), so whether it is
    the no-speculation baseline is said by ``baseline``."""
    if baseline:
        return "no speculation"
    p = params or {}
    return ", ".join(f"{_SHORT.get(k, k)}={v}" for k, v in p.items()) or "the space's fixed config"


def _print_unsynced(outcome: SearchOutcome, out: TextIO) -> None:
    """What MLflow does not hold yet, and the command that writes it (nothing when all is there)."""
    if not outcome.unsynced:
        return
    print(f"MLflow does not hold {outcome.unsynced} of this search's records yet ({outcome.tracking_uri} "
          f"failed); they are kept in {outcome.spool_path}.\nSync them when it answers:  "
          f"{outcome.sync_command}", file=out)
