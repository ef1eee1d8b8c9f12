"""The one interface a search tracks through: :class:`SearchTracker`.

A search (its callbacks, pre-screen and conclusion, :mod:`autotune.search`) writes to MLflow and
reads a few ids back through exactly these operations. Two classes implement it:
:class:`~autotune.tracking.tracker.Tracker` writes each one to MLflow at once (and may raise), and
:class:`~autotune.tracking.durable.DurableTracker` spools each write first and replays it (and never
raises), which is what a search uses. Reading runs back is the
:class:`~autotune.tracking.tracker.Tracker`'s (``autotune sync``) and
:mod:`autotune.tracking.search_reader`'s (export).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from optuna import Study

    from autotune.tracking.durable import DurableTracker
    from autotune.tracking.runs import Winner
    from autotune.tracking.tracker import Tracker
    from autotune.trial.result import TrialResult

#: ``(tracker, winner) -> {file name: text}``: the winner's files for the search run's ``winner/``
#: (the search passes :func:`autotune.export.launch_command.winner_files`, so tracking never imports export).
WinnerFiles = Callable[["Tracker", "Winner"], Mapping[str, str]]


class SearchTracker(Protocol):
    """What a search writes to MLflow, and the ids it reads back.

    Writes return nothing the search uses (a :class:`Tracker` returns run ids, a
    :class:`DurableTracker` has none yet while a write waits in its spool).
    """

    @property
    def tracking_uri(self) -> str:
        """The MLflow store's URI."""
        ...

    @property
    def experiment_id(self) -> str | None:
        """The search's experiment, None until the store answered."""
        ...

    @property
    def parent_run_id(self) -> str | None:
        """The search run, None until it is made."""
        ...

    def log_trial(self, trial_id: str, result: TrialResult, *, kind: str | None = None,
                  confirmed: bool | None = None, drain: bool = True) -> object:
        """Log a trial's result (its next attempt) on the trial's run.

        Args:
            trial_id: The Ray trial id (or ``finalist-<id>``, ``baseline-<key>``).
            result: The trial's result.
            kind: ``trial``, ``baseline`` or ``finalist``; from ``result.is_baseline`` if None.
            confirmed: Tag the run ``autotune.confirmed`` (a finalist re-measured and feasible).
            drain: Write to MLflow now; False only records it, for a later :meth:`drain`.
        """
        ...

    def log_lost_attempt(self, trial_id: str, reason: str, *, params: Mapping[str, Any] | None = None,
                         kind: str = "trial") -> object:
        """Record that an attempt of a trial ended without a result (Ray runs it again)."""
        ...

    def log_to_search(self, *, params: Mapping[str, Any] | None = None,
                      metrics: Mapping[str, float | None] | None = None, tags: Mapping[str, str] | None = None,
                      files: Mapping[str, str | os.PathLike[str]] | None = None,
                      texts: Mapping[str, str] | None = None, artifact_dir: str | None = None) -> None:
        """Log facts on the search run (the NCCL pre-screen, say).

        Args:
            params: Params (None values left out; a param already logged keeps its value).
            metrics: Metrics; None and non-finite values are left out (unknown is not 0).
            tags: Tags. files: Artifact name -> local file to copy. texts: Artifact name -> text.
            artifact_dir: Folder of the artifacts in the run.
        """
        ...

    def fail_search(self, reason: str) -> None:
        """End the search run FAILED, ``reason`` its ``autotune.reason`` tag."""
        ...

    def finish_search(self, *, study: Study | None = None, status: str = "FINISHED",
                      sglang_default: Mapping[str, Any] | None = None, winner_files: WinnerFiles | None = None,
                      report_files: Mapping[str, str] | None = None) -> object:
        """Summarise the search on its run and end it (:func:`autotune.tracking.summary.finish_search`).

        Args:
            study: The search's ``optuna.Study``, if it has one.
            status: The search run's final MLflow status (``FINISHED``, ``FAILED``, ``KILLED``).
            sglang_default: SGLang's default speculative config as the search measured it
                (:func:`autotune.space.warm_start.compare_to_default`): logged as the tag
                ``autotune.sglang_default`` and the metrics ``sglang_default_output_tok_s`` and
                ``gain_over_sglang_default`` (left out when unknown).
            winner_files: ``(tracker, winner) -> {file name: text}``, logged under ``winner/``
                (the search passes :func:`autotune.export.launch_command.winner_files`: the real-SGLang
                launch as ``launch.sh``, ``config.yaml`` and ``launch.json``). An error it raises is
                logged as the tag ``autotune.export_error`` and loses nothing else.
            report_files: ``{file name: text}`` logged under ``report/`` (the search's
                ``trials.csv`` and ``summary.md``, :mod:`autotune.search.summary_files`).
        """
        ...

    def drain(self, *, force: bool = False) -> int:
        """Write what waits to MLflow; returns how many writes still wait."""
        ...

    def unsynced(self) -> int:
        """How many writes MLflow does not hold yet."""
        ...


if TYPE_CHECKING:
    def _both_conform(tracker: Tracker, durable: DurableTracker) -> tuple[SearchTracker, SearchTracker]:
        # mypy checks here that each class implements the interface (tests check it at run time).
        return tracker, durable


__all__ = ["SearchTracker", "WinnerFiles"]
