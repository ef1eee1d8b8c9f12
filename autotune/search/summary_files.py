"""A search's two files for people: ``trials.csv`` (one row per measurement) and ``summary.md``.

The driver writes both from the records it concluded on (every trial, the baselines the trials
measured, each finalist's re-measurement and fresh baseline), so they say what the console and the
summary JSON say. They are logged on the search's parent run under ``report/`` and, with
``--summary-json``, written beside that file. An unknown figure is an empty CSV cell and a ``-`` in
the Markdown, never a 0.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.bench.workload_shape import shape_line
from autotune.figures import finite
from autotune.search.console import config_label, level_table, level_title, num, serve_heading
from autotune.search.gpu_bill import bill_table
from autotune.search.level_answers import levels_of
from autotune.search.options import SearchOutcome
from autotune.tracking.summary import SUMMARY_REPORT
from autotune.trial.gpu_time import FLAT_NAMES, GpuTotals, flat
from autotune.trial.level_results import LoadLevel, metric_suffix
from autotune.trial.report import phase_rows
from autotune.trial.result import TrialResult

__all__ = ["Row", "PER_LEVEL_JSON", "TRIALS_CSV", "SUMMARY_MD", "rows_of", "trials_csv", "summary_md",
           "write_beside"]

# summary.md's top is also the search run's description in MLflow (autotune.tracking.summary).
TRIALS_CSV, SUMMARY_MD = "trials.csv", SUMMARY_REPORT
# With load levels: the summary JSON's per_level, as a file of its own (search.level_answers).
PER_LEVEL_JSON = "per_level.json"

# What every row carries after the searched parameters; phases in ms per cycle.
# window: which window output_tok_s is over (autotune.trial.window decides); window_reason: why the
# whole window spoke where the steady one was asked; both windows' medians with their spreads.
_FIGURES = ("output_tok_s", "output_tok_s_spread", "output_tok_s_range_pct", "window", "window_reason",
            "output_tok_s_whole", "output_tok_s_whole_spread_pct", "output_tok_s_steady",
            "output_tok_s_steady_spread_pct", "baseline_tok_s",
            "speedup", "accept_length", "acceptance", "synthetic_accept_length",
            "break_even_accept_length", "startup_s", "load_asked", "load_ran", "load_queued",
            "load_tail_pct", "load_capped", "load_note")
_PHASES = ("draft_ms", "verify_ms", "extend_ms", "decode_ms", "other_ms", "cycle_ms", "verify_pct")
# Per load level (autotune.trial.level_results), after everything else so single-level columns keep
# their places: the level's verdict and the figures its break-even rests on.
_LEVEL_COLUMNS = ("status", "output_tok_s", "baseline_tok_s", "speedup", "accept_length",
                  "break_even_accept_length", "load_ran", "load_capped")


@dataclass(frozen=True)
class Row:
    """One measurement: ``kind`` is ``trial``, ``baseline`` or ``finalist``."""

    kind: str
    trial_id: str
    result: TrialResult


def rows_of(results: Iterable[tuple[str, dict, Any]],
            finalists: Iterable[tuple[str, TrialResult, TrialResult | None]] = ()) -> list[Row]:
    """The rows of a search, in the order measured.

    Args:
        results: ``(trial id, config, TrialReport)`` for every trial Ray ran; a trial that also
            measured its group's baseline adds that baseline as a row of its own.
        finalists: ``(trial id, re-measured result, fresh baseline or None)`` per finalist.
    """
    rows: list[Row] = []
    for tid, cfg, report in results:
        result = report.result
        if result is None:  # no measurement behind it: only its verdict is known
            result = TrialResult(status=report.status or "failed", reason=report.reason,
                                 params=dict(cfg), is_baseline=report.is_baseline)
        if report.baseline is not None:
            rows.append(Row("baseline", report.baseline_label, report.baseline))
        rows.append(Row("baseline" if result.is_baseline else "trial", tid, result))
    for tid, result, base in finalists:
        rows.append(Row("finalist", f"finalist-{tid}", result))
        if base is not None:
            rows.append(Row("baseline", f"finalist-{tid}-baseline", base))
    return rows


def _param_names(rows: Sequence[Row]) -> list[str]:
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row.result.params or {}))
    return list(names)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        v = finite(value)
        return "" if v is None else round(v, 4)
    return value


def trials_csv(rows: Sequence[Row]) -> str:
    """``trials.csv``: kind, trial id, verdict, reason, each searched parameter, the figures; with
    load levels, then each level's verdict and figures (``speedup_c8``, ``speedup_r2``, ...)."""
    params = _param_names(rows)
    levels = levels_of(row.result for row in rows)
    level_cols = [f"{f}{metric_suffix(c)}" for c in levels for f in _LEVEL_COLUMNS]
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(["kind", "trial_id", "status", "reason", *params, *_FIGURES, *_PHASES, *FLAT_NAMES,
                  *level_cols])
    for row in rows:
        r, ph = row.result, row.result.phases or {}
        at = {LoadLevel.of_record(lv): lv for lv in r.levels or []}
        out.writerow([row.kind, row.trial_id, r.status, r.reason or "",
                      *(_cell((r.params or {}).get(p)) for p in params),
                      *(_cell(getattr(r, f)) for f in _FIGURES),
                      *(_cell(ph.get(p)) for p in _PHASES),
                      *(_cell(v) for v in flat(r.gpu_time).values()),
                      *(_cell(at.get(c, {}).get(f)) for c in levels for f in _LEVEL_COLUMNS)])
    return buf.getvalue()


def capped_section(rows: Sequence[Row]) -> list[str]:
    """``summary.md``'s list of the measurements whose server held back part of the asked load."""
    capped = [r for r in rows if r.result.load_capped or any(lv.get("load_capped")
                                                             for lv in r.result.levels or [])]
    if not capped:
        return []
    lines = ["", "## Capped load", "",
             "The server ran fewer requests than the concurrency asked (its running-request cap, "
             "`max_running_requests`): these figures were taken at the load it sustained.", "",
             "| kind | trial | config | load | verdict |", "|---|---|---|---|---|"]
    for r in capped:
        notes = ([r.result.load_note] if r.result.load_note else []) + [
            f"{LoadLevel.of_record(lv).label}: {lv['load_note']}" for lv in r.result.levels or []
            if lv.get("load_note") and lv.get("load_note") != r.result.load_note]
        lines.append(f"| {r.kind} | {r.trial_id} | {config_label(r.result.params, baseline=r.result.is_baseline)} | "
                     f"{'<br>'.join(notes)} | {(r.result.load_comparison or '').replace('|', '/')} |")
    return lines


def summary_md(outcome: SearchOutcome, rows: Sequence[Row]) -> str:
    """``summary.md``: the verdict, the winner with its phases and launch command, the finalists,
    SGLang's default, and every measurement ranked."""
    lines = [f"# autotune search `{outcome.name}`", ""]
    lines.append(f"{outcome.trials} trials: {outcome.counts()}.")
    if outcome.interrupted:
        lines += ["", "**Interrupted**: no winner is given; resume the search to finish it."]
    if outcome.stop_rule is not None:
        lines += ["", f"Stop rule ({outcome.stop_rule['setting']}): {outcome.stop_rule['reason']}."]
    w = TrialResult.from_dict(outcome.winner) if outcome.winner else None
    if w is None and not outcome.interrupted:
        lines += ["", "**No config ran successfully: nothing to recommend.**"]
    if w is not None:
        head = (f"{outcome.baseline_line()}: **serve without speculative decoding**." if outcome.baseline_wins
                else f"**Winner: {config_label(w.params, baseline=w.is_baseline)}**, "
                + ("decided by the trials' evidence (not re-measured)." if outcome.settled_by_evidence
                   else "confirmed beside a fresh baseline" + ("; the runner-up is within the noise, either "
                                                                "serves as well." if outcome.within_noise else ".")))
        if outcome.margin is not None and not outcome.baseline_wins:
            head += f" Its {outcome.margin['line']}."
        lines += ["", head, "", "| figure | value |", "|---|---|",
                  f"| output tok/s | {num(w.output_tok_s, '.1f')} (spread {num(w.output_tok_s_spread, '.1f')}) |",
                  f"| baseline tok/s | {num(w.baseline_tok_s, '.1f')} |",
                  f"| speedup | {num(w.speedup, '.3f')}x |"]
        if w.load_capped:
            lines.append(f"| load | capped: {w.load_note} |")
        if w.load_comparison:
            lines.append(f"| compared | {w.load_comparison} |")
        if not w.is_baseline:
            accept = num(w.accept_length, ".2f")
            if w.acceptance == "synthetic":
                accept += " (synthetic acceptance: forced on dummy weights, not a draft's)"
            lines += [f"| accept length | {accept} |",
                      f"| break-even accept length | {num(w.break_even_accept_length, '.2f')} |"]
        ph = w.phases or {}
        lines += ["", "| phase | ms per cycle | share |", "|---|---|---|"]
        lines += [f"| {label} | {num(ph.get(f'{k}_ms'), '.2f')} | {num(ph.get(f'{k}_pct'), '.1f')}% |"
                  for label, k in phase_rows(speculative=not w.is_baseline)]
        lines.append(f"| total | {num(ph.get('cycle_ms'), '.2f')} | |")
        heading, command = serve_heading(w.serve_command, w.launch_command)
        if command:
            lines += ["", f"{heading}:", "", "```", command, "```"]
    if outcome.per_level:
        title = level_title(outcome.per_level)
        lines += ["", f"## Best config per {title}", "",
                  "Each level's winner by the same policy as the single winner, every config judged "
                  f"against its baseline measured at the same {title}.", "",
                  *level_table(outcome.per_level)]
    if outcome.finalists:
        lines += ["", "## Finalists", "", "| config | search tok/s | confirmed tok/s | speedup | verdict |",
                  "|---|---|---|---|---|"]
        lines += [f"| {config_label(f.get('params'))} | {num(f.get('search_tok_s'), '.1f')} | "
                  f"{num(f.get('confirmed_tok_s'), '.1f')} | {num(f.get('confirmed_speedup'), '.3f')}x | "
                  f"{f.get('status')}{': ' + f['reason'] if f.get('reason') else ''} |"
                  for f in outcome.finalists]
    d = outcome.sglang_default
    if d is not None:
        lines += ["", "## SGLang's default", "",
                  f"{config_label(d.get('params'))} (auto-picked for {d.get('model_arch') or 'this model'}): "
                  f"{d.get('status')}, {num(d.get('output_tok_s'), '.1f')} tok/s, speedup "
                  f"{num(d.get('speedup'), '.3f')}x; the winner gives {num(d.get('gain'), '.3f')}x that."]
    if outcome.gpu_time is not None:
        totals = GpuTotals.from_dict(outcome.gpu_time)
        lines += ["", "## GPU time", "",
                  f"{totals.gpu_s:,.1f} GPU-seconds ({totals.gpu_s / 3600:.3f} GPU-hours): every server the "
                  "search started, from spawn until its process group was gone, times the GPUs it held, "
                  "and the tuner's overhead between trials. GPU-seconds:", "", *bill_table(totals)]
        if outcome.gpu_time.get("unrecorded_trials"):
            lines += ["", f"{outcome.gpu_time['unrecorded_trials']} trial(s) started no server or errored "
                      "inside Ray: their time is not counted."]
    if outcome.workload_shape:
        lines += ["", "## Workload", "", "The figures above were measured on: "
                  + shape_line(outcome.workload_shape) + "."]
    if outcome.production_match:
        match = outcome.production_match
        lines += ["", "## Production sample", "",
                  ("**Far from production.** " if match["far"] else "Matched. ") + str(match["line"])]
    lines += capped_section(rows)
    measured = sorted(rows, key=lambda r: -(finite(r.result.output_tok_s) or float("-inf")))
    lines += ["", "## Every measurement", "", "| kind | trial | config | status | tok/s | speedup | accept | reason |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.kind} | {r.trial_id} | {config_label(r.result.params, baseline=r.result.is_baseline)} | "
              f"{r.result.status} | "
              f"{num(r.result.output_tok_s, '.1f')} | {num(r.result.speedup, '.3f')} | "
              f"{num(r.result.accept_length, '.2f')} | {(r.result.reason or '').replace('|', '/')} |"
              for r in measured]
    return "\n".join(lines) + "\n"


def write_beside(summary_json: str | Path, files: dict[str, str]) -> list[Path]:
    """Write ``files`` into the folder of ``summary_json`` (the search's ``-o FILE``): ``summary.md``
    takes that file's stem (``out/s.json`` -> ``out/s.md``; ``out/s.summary.md`` when FILE is
    ``out/s.md`` itself), ``trials.csv`` becomes ``out/s.trials.csv``, so two searches writing into
    one folder keep their own files."""
    target = Path(summary_json)
    written = []
    for name, text in files.items():
        path = target.with_name(f"{target.stem}.{name}")
        if name == SUMMARY_MD and target.suffix != ".md":
            path = target.with_suffix(".md")
        path.write_text(text)
        written.append(path)
    return written
