"""The live table a search prints: one row per finished trial, with the best so far."""

from __future__ import annotations

import sys
from typing import Any, Mapping, Sequence, TextIO

from autotune.search.trial_report import TrialReport
from autotune.space import synthetic
from autotune.trial.outcome import Status

# Parameters worth a column, in this order, when the space searches them.
_KEY_PARAMS = (("speculative_num_steps", "steps"), ("speculative_eagle_topk", "topk"),
               ("speculative_num_draft_tokens", "draft"), ("tp_size", "tp"))


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def describe_params(params: Mapping[str, Any]) -> str:
    """Compact text of the parameters, key ones first with short names."""
    parts = []
    for name, short in _KEY_PARAMS:
        if name in params:
            parts.append(f"{short}={params[name]}")
    for name, value in params.items():
        if name not in dict(_KEY_PARAMS) and value is not None:
            short = name.replace("speculative_", "spec_")
            parts.append(f"{short}={value}")
    return " ".join(parts) or "baseline"


class ProgressTable:
    """Prints rows as trials finish. Printing lives here, not in the measuring code.

    Args:
        out: Where rows go.
        maximize: Objective direction, for "best so far".
        objective: The objective's metric, named in the "best so far" column's header (its
            values are the objective's, a latency for a minimised latency objective).
    """

    def __init__(self, out: TextIO | None = None, *, maximize: bool = True,
                 objective: str = "output_tok_s") -> None:
        self.out = sys.stdout if out is None else out
        self.maximize = maximize
        best = "best tok/s" if objective == "output_tok_s" else f"best {objective}"
        self.header_line = (f"{'#':>3} {'trial':<14} {'params':<52} {'tok/s':>8} {'accept':>6} "
                            f"{'speedup':>7} {'status':<10} {best:>10}")
        self.rows = 0
        self._headed = False
        self.best: float | None = None
        self.best_params: str | None = None

    def carry_on(self, finished: Sequence[tuple[Mapping[str, Any], TrialReport]]) -> None:
        """Continue after a resume: the rows number on from the trials finished earlier, and the
        best-so-far column starts at their best (else a resumed search's first row would read as
        its best)."""
        for params, report in finished:
            self.rows += 1
            self._consider(params, report)
        if finished:
            best = "none feasible" if self.best is None else f"{self.best:.1f} ({self.best_params})"
            print(f"{len(finished)} trial(s) finished before the resume; best so far: {best}",
                  file=self.out, flush=True)

    def _consider(self, params: Mapping[str, Any], report: TrialReport) -> None:
        value = report.objective
        if report.feasible and value is not None:
            if self.best is None or (value > self.best if self.maximize else value < self.best):
                self.best = value
                self.best_params = describe_params(params)

    def header(self) -> None:
        print(self.header_line, file=self.out, flush=True)
        print("-" * len(self.header_line), file=self.out, flush=True)

    def row(self, *, trial: str, params: Mapping[str, Any], report: TrialReport,
            label: str | None = None) -> None:
        if not self._headed:
            self.header()
            self._headed = True
        self.rows += 1
        self._consider(params, report)
        status = report.status or "?"
        text = describe_params(params) if label is None else label
        # A forced accept length is marked "s": it is the synthetic model's, not a draft's.
        forced = report.acceptance == synthetic.SYNTHETIC and report.accept_length is not None
        accept = _fmt(report.accept_length, "5.2f") + "s" if forced else _fmt(report.accept_length, "6.2f")
        print(f"{self.rows:>3} {trial[:14]:<14} {text[:52]:<52} "
              f"{_fmt(report.output_tok_s, '8.1f')} {accept:>6} "
              f"{_fmt(report.speedup, '7.3f')} {status:<10} {_fmt(self.best, '10.1f')}",
              file=self.out, flush=True)
        reason = report.reason
        if reason and status != Status.FEASIBLE:
            print(f"{'':>18}-> {reason[:110]}", file=self.out, flush=True)
        result = report.result
        if result is not None and result.load_capped:
            # The figure above was not taken at the asked concurrency: say what the server ran.
            print(f"{'':>18}-> capped load: {result.load_note}", file=self.out, flush=True)
