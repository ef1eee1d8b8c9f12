"""What a search is asked to do and what it found: :class:`SearchOptions` and :class:`SearchOutcome`.

Both are plain data shared by the driver (:mod:`autotune.search.run`), its ending
(:mod:`autotune.search.conclude`) and its console report (:mod:`autotune.search.console`), and
used by callers that run a search in-process (tests, benchmarks); kept apart so that none of
them imports the driver to name them.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from autotune.trial.winner import BASELINE_BETTER, NO_FINALIST_HELD


@dataclass
class SearchOptions:
    """Everything ``python -m autotune.search`` takes."""

    space: str
    trials: int | None = None
    concurrency: int | None = None
    name: str | None = None
    address: str | None = None
    resume: bool = False
    seed: int | None = None
    tracking_uri: str | None = None
    root: str = field(default_factory=os.getcwd)
    tracking: bool = True


@dataclass
class SearchOutcome:
    """What a finished (or interrupted) search found."""

    name: str
    winner: dict[str, Any] | None
    baseline: dict[str, Any] | None
    trials: int
    feasible: int
    infeasible: int
    failed: int
    interrupted: bool
    baseline_wins: bool
    finalists: list[dict[str, Any]]
    tracking_uri: str | None
    parent_run_id: str | None
    experiment_path: str | None
    overheads_s: list[float]
    sglang_default: dict[str, Any] | None = None
    experiment_id: str | None = None
    #: ``trials.csv`` and ``summary.md`` (:mod:`autotune.search.summary_files`), name -> text.
    report_files: dict[str, str] = field(default_factory=dict)
    #: ``{"storage", "name"}`` of the Optuna study when ``search.storage`` kept it outside Ray.
    optuna_study: dict[str, str] | None = None
    #: With ``workload.concurrency: [..]``: the best config per level
    #: (:func:`autotune.search.level_answers.level_answers`), in the order written; None otherwise.
    per_level: list[dict[str, Any]] | None = None
    #: What the figures were measured on (:func:`autotune.bench.workload_shape.workload_shape`),
    #: with the winner's server-counted input tokens (``input_tokens_p10/p50/p90``).
    workload_shape: dict[str, Any] | None = None
    #: The measured prompts against the space's production sample
    #: (:meth:`autotune.bench.shape_match.ShapeMatch.to_dict`); None when it declares none.
    production_match: dict[str, Any] | None = None
    #: Spooled MLflow writes MLflow did not take by the end (None: no tracking), the spool, and
    #: the command that replays them (:mod:`autotune.tracking.durable`).
    unsynced: int | None = None
    spool_path: str | None = None
    sync_command: str | None = None
    #: Where the search's GPU time went (:meth:`autotune.trial.gpu_time.GpuTotals.to_dict`), and how
    #: many trials started no server or errored inside Ray (not in it); None when not counted.
    gpu_time: dict[str, Any] | None = None
    #: The winner's margin over the runner-up and break-even, with its interval
    #: (:meth:`autotune.search.evidence.WinnerEvidence.to_dict`); None when unknown.
    margin: dict[str, Any] | None = None

    @property
    def within_noise(self) -> bool:
        """The winner's margin over a measured runner-up is not separated at the stated confidence:
        the two are as good as each other on this evidence (False when unknown, as it is without
        an interval: too few readings)."""
        over: dict[str, Any] = (self.margin or {}).get("over_runner_up") or {}
        return (bool(over) and not over.get("separated") and over.get("low") is not None
                and over.get("high") is not None)

    @property
    def settled_by_evidence(self) -> bool:
        """The winner was named from the trials' readings, with no finalist re-measured."""
        return not self.finalists and self.margin is not None
    #: The stop rule's decision (:meth:`autotune.search.stopping.StopDecision.record`), None when
    #: unknown (interrupted, resumed).
    stop_rule: dict[str, Any] | None = None
    #: Trials Ray Tune stopped after a round (status ``stopped``): a ``search.scheduler``, or the
    #: wall-time budget; each one's reason says which.
    stopped: int = 0
    #: The winner policy's reason for its pick (:attr:`autotune.trial.winner.Pick.note`); None
    #: when nothing was picked.
    winner_why: str | None = None

    def baseline_line(self) -> str:
        """Why the baseline is the winner, in one sentence for the console and ``summary.md``:
        the winner policy's reason, with each finalist's fate when none held up."""
        if self.winner_why == BASELINE_BETTER:
            return "A no-speculation baseline is better than every feasible speculative config"
        if self.winner_why == NO_FINALIST_HELD and self.finalists:
            fates = Counter(f"{f.get('status')}" + (f": {f['reason']}" if f.get("reason") else "")
                            for f in self.finalists)
            said = "; ".join(f"{n} {fate}" for fate, n in fates.items())
            return f"No finalist held up when re-measured ({said})"
        return "No speculative config beat its no-speculation baseline"

    def counts(self) -> str:
        """The trials by outcome, as the console and ``summary.md`` state them."""
        stopped = f", {self.stopped} stopped after a round" if self.stopped else ""
        return (f"{self.feasible} feasible, {self.infeasible} infeasible, {self.failed} failed"
                f"{stopped}")

    def summary(self) -> dict[str, Any]:
        w = self.winner or {}
        return {
            "name": self.name,
            "interrupted": self.interrupted,
            "baseline_wins": self.baseline_wins,
            "winner_why": self.winner_why,
            "winner_params": w.get("params"),
            "winner_is_baseline": w.get("is_baseline"),
            "output_tok_s": w.get("output_tok_s"),
            "output_tok_s_spread": w.get("output_tok_s_spread"),
            "baseline_tok_s": w.get("baseline_tok_s"),
            "speedup": w.get("speedup"),
            "accept_length": w.get("accept_length"),
            "acceptance": w.get("acceptance"),
            "synthetic_accept_length": w.get("synthetic_accept_length"),
            "break_even_accept_length": w.get("break_even_accept_length"),
            "phases": w.get("phases"),
            "launch_command": w.get("launch_command"),
            "serve_command": w.get("serve_command"),
            "trials": {"total": self.trials, "feasible": self.feasible,
                       "infeasible": self.infeasible, "failed": self.failed, "stopped": self.stopped},
            "finalists": self.finalists,
            "margin": self.margin,
            "stop_rule": self.stop_rule,
            "per_level": self.per_level,
            # SGLang's auto-picked speculative config as measured here, and the winner's gain on it.
            "sglang_default": self.sglang_default,
            "gain_over_sglang_default": (self.sglang_default or {}).get("gain"),
            "tracking_uri": self.tracking_uri,
            "parent_run_id": self.parent_run_id,
            "optuna_study": self.optuna_study,
            "tracking_unsynced": self.unsynced,
            "tracking_sync_command": self.sync_command if self.unsynced else None,
            "gpu_time": self.gpu_time,
            "tuner_overhead_s_median": (sorted(self.overheads_s)[len(self.overheads_s) // 2]
                                        if self.overheads_s else None),
        }
