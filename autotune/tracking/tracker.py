"""MLflow tracking of a search: one parent run per search, one nested run per trial.

Layout of a store (the default is local, under the project directory)::

    <root>/mlruns/mlflow.db                      sqlite backend store
    <root>/mlruns/artifacts/<search name>/...    artifacts, one experiment per search name

Each search is a parent run (tag ``autotune.kind=search``) holding the space file, the search
settings and the versions it ran with; at the end it gets the summary metrics, the plots and the
winner's exported command. Each trial, baseline and finalist is a nested run keyed by its Ray trial
id (tag ``autotune.trial_id``): logging the same trial id again updates that run, so a resumed
search never duplicates one. Unknown metrics are absent from a run, never 0.

A :class:`Tracker` holds only strings (URIs and ids) and builds its MLflow client lazily, so it
pickles: the search driver can log every trial itself, or hand the tracker to Ray workers that log
their own trial runs. MLflow is imported on first use, not with this module.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.command_line import versions
from autotune.launch.spec import LaunchSpec
from autotune.tracking import stale, store, summary, trial_log
from autotune.tracking.content import search_tags, spec_of
from autotune.tracking.interface import WinnerFiles
from autotune.tracking.runs import (KIND_BASELINE, KIND_SEARCH, KIND_TRIAL, TAG_CONFIRMED,
                                    TAG_KIND, TAG_PARENT, TAG_REASON, TAG_TRIAL_ID, TrialRun,
                                    trial_runs_of)
from autotune.tracking.store import MAX_TAG, log_batch, new_params, retry
from autotune.tracking.summary import SearchSummary

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from optuna import Study

    from autotune.trial.result import TrialResult


class Tracker:
    """MLflow tracking of one search (an experiment named after it).

    Build it, :meth:`connect` (fails fast with :class:`ConfigError`), then :meth:`start_search`,
    :meth:`log_trial` for each trial, and :meth:`finish_search`. Every call is a plain store
    call, safe from several processes at once (sqlite lock contention is retried). It implements
    :class:`~autotune.tracking.interface.SearchTracker`, writing at once (nothing waits to drain).

    Args:
        name: The search name, which is the experiment name.
        root: Project directory of the default local store; the working directory if None.
        tracking_uri: An MLflow tracking URI (``http://host:5000``, ``sqlite:///...``) to use
            instead of the local store.
        artifact_root: Where a new experiment keeps artifacts (``<artifact_root>/<name>``); by
            default ``<root>/mlruns/artifacts`` for the local store and the server's choice for
            a tracking server.
    """

    def __init__(self, name: str, *, root: str | os.PathLike[str] | None = None,
                 tracking_uri: str | None = None, artifact_root: str | None = None) -> None:
        if not name or not name.strip():
            raise ValueError("the search name is empty; give --name or a space file name")
        self.name = name
        self.root = str(Path(root if root is not None else os.getcwd()).resolve())
        if tracking_uri:
            self.tracking_uri = tracking_uri
            self.artifact_root = artifact_root
            self.local = False
        else:
            self.tracking_uri, default_artifacts = store.default_store(self.root)
            self.artifact_root = artifact_root or default_artifacts
            self.local = True
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None
        self._client: MlflowClient | None = None
        self._runs: dict[str, str] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def __repr__(self) -> str:
        return f"Tracker(name={self.name!r}, tracking_uri={self.tracking_uri!r}, parent_run_id={self.parent_run_id!r})"

    @property
    def client(self) -> MlflowClient:
        """The MLflow client (imports MLflow the first time)."""
        if self._client is None:
            self._client = store.make_client(self.tracking_uri)
        return self._client

    def connect(self, *, create: bool = True) -> Tracker:
        """Check the store and find (or create) the experiment. Fast; nothing is logged.

        Args:
            create: Create the store and experiment if missing; False for read-only use (export).

        Returns:
            This tracker, with ``experiment_id`` set.

        Raises:
            StoreUnreachable: The tracking server does not answer (a search spools and goes on).
            ConfigError: The URI is malformed, the store cannot be opened, the experiment was
                deleted, or (``create=False``) it does not exist.
        """
        # MLflow prints "View run ... / View experiment ..." to stdout for every run it ends on a
        # tracking server: inside the live table. Set before Ray starts, so workers inherit it.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        store.check_uri(self.tracking_uri)
        if self.tracking_uri.startswith(("http://", "https://")):
            store.probe_server(self.tracking_uri)
        if self.local:
            store.prepare_local(self.root, create=create)
        with store.creation_lock(self.tracking_uri) if create else contextlib.nullcontext():
            self.experiment_id = store.open_experiment(self.client, self.name, tracking_uri=self.tracking_uri,
                                                       artifact_root=self.artifact_root, create=create)
        return self

    def _need_experiment(self) -> str:
        if self.experiment_id is None:
            self.connect()
        assert self.experiment_id is not None
        return self.experiment_id

    def _need_parent(self) -> str:
        if self.parent_run_id is None:
            raise RuntimeError("no search run: call start_search() (or resume) first")
        return self.parent_run_id

    def _search(self, filter_string: str, *, order_by: list[str] | None = None,
                limit: int | None = None) -> list[Any]:
        return store.search_runs(self.client, self._need_experiment(), filter_string, order_by=order_by,
                                 limit=limit)

    def parent_runs(self) -> list[Any]:
        """The experiment's search runs, newest first (MLflow ``Run`` objects)."""
        return self._search(f"tags.`{TAG_KIND}` = '{KIND_SEARCH}'", order_by=["attributes.start_time DESC"])

    def search_run_tagged(self, tag: str, value: str) -> str | None:
        """A search run of this experiment whose tag ``tag`` is ``value``, None if there is none."""
        runs = self._search(f"tags.`{TAG_KIND}` = '{KIND_SEARCH}' and tags.`{tag}` = '{value}'")
        return runs[0].info.run_id if runs else None

    def use_search_run(self, run_id: str | None) -> None:
        """Go on with the search run ``run_id`` (made earlier): its trial runs are looked up anew."""
        self.parent_run_id, self._runs = run_id, {}

    def latest_parent_run_id(self) -> str | None:
        """The newest search run of this experiment, None if there is none."""
        runs = self._search(f"tags.`{TAG_KIND}` = '{KIND_SEARCH}'", order_by=["attributes.start_time DESC"], limit=1)
        return runs[0].info.run_id if runs else None

    def _child_runs(self, parent_run_id: str) -> list[Any]:
        return self._search(f"tags.`{TAG_PARENT}` = '{parent_run_id}'", order_by=["attributes.start_time ASC"])

    def trial_runs(self, parent_run_id: str | None = None) -> list[TrialRun]:
        """Every trial, baseline and finalist run of a search, oldest first.

        Args:
            parent_run_id: The search run; this tracker's own if None.
        """
        parent = parent_run_id or self._need_parent()
        return trial_runs_of(self._child_runs(parent))

    def find_trial_run(self, trial_id: str) -> str | None:
        """The run id of a trial under this search, None if it has none yet."""
        trial_log.check_trial_id(trial_id)
        if trial_id in self._runs:
            return self._runs[trial_id]
        parent = self._need_parent()
        runs = self._search(f"tags.`{TAG_PARENT}` = '{parent}' and tags.`{TAG_TRIAL_ID}` = '{trial_id}'",
                            order_by=["attributes.start_time ASC"])
        if not runs:
            return None
        self._runs[trial_id] = runs[0].info.run_id
        return self._runs[trial_id]

    # -- the search run ----------------------------------------------------------------------

    def start_search(self, *, space_path: str | os.PathLike[str] | None = None, backend: str | None = None,
                     profile: str | None = None, budget: int | None = None, seed: int | None = None,
                     sampler: str | None = None, ray_address: str | None = None,
                     params: Mapping[str, Any] | None = None, resume: bool = False,
                     run_name: str | None = None, objective: tuple[str, str] | None = None,
                     tags: Mapping[str, str] | None = None, started_ms: int | None = None) -> str:
        """Open the search's parent run: a new one, or with ``resume`` the newest one.

        On resume, runs the killed driver left RUNNING are marked FAILED first
        (:meth:`mark_stale_runs`), and trials logged again update their runs. A new search also
        marks FAILED the earlier search runs of this experiment whose driver process on this host
        is gone.

        Args:
            space_path: The search space file; logged as a param and as an artifact.
            backend: ``sglang`` or ``sim``.
            profile: The sim profile, if any.
            budget: Trial budget.
            seed: Sampler seed.
            sampler: Optuna sampler name.
            ray_address: The Ray cluster address (``local`` for an in-process cluster).
            params: More params to log (None values are left out).
            resume: Continue this tracker's search run if it names one, else the newest one.
            run_name: The parent run's name; ``<name>`` with a timestamp if None.
            objective: ``(metric, direction)`` the search ranks by, tagged as
                ``autotune.objective`` so that the winner tags and the export rank the same way.
            tags: More tags for a new search run. started_ms: Its start time (now if None).

        Returns:
            The parent run id (also kept as ``self.parent_run_id``).
        """
        experiment = self._need_experiment()
        all_params: dict[str, Any] = {
            "space_path": str(Path(space_path).resolve()) if space_path else None, "backend": backend,
            "profile": profile, "budget": budget, "seed": seed, "sampler": sampler,
            "ray_address": ray_address, **{f"version_{k}": v for k, v in versions().items()},
            **dict(params or {})}
        driver = stale.driver_tags()
        parent = (self.parent_run_id or self.latest_parent_run_id()) if resume else None
        if parent is None:
            for run in self.parent_runs():
                if run.info.status == "RUNNING" and not stale.driver_alive(run.data.tags):
                    self.mark_stale_runs(parent_run_id=run.info.run_id, include_parent=True)
            run_tags = search_tags(self.name, objective=objective, backend=backend, more={**driver, **dict(tags or {})})
            name = run_name or f"{self.name} {time.strftime('%Y-%m-%d %H:%M:%S')}"
            run = retry(lambda: self.client.create_run(experiment, tags=run_tags, run_name=name,
                                                        start_time=started_ms))
            parent = run.info.run_id
        else:
            self.parent_run_id = parent
            self.mark_stale_runs()
            retry(lambda: self.client.update_run(parent, status="RUNNING"))
            log_batch(self.client, parent, tags={**driver, "autotune.resumed": "true"})
        self.parent_run_id = parent
        self._runs = {}
        log_batch(self.client, parent, params=new_params(self._run(parent), all_params))
        if space_path and Path(space_path).is_file():
            retry(lambda: self.client.log_artifact(parent, str(space_path), "space"))
        return parent

    def _run(self, run_id: str) -> Any:
        return retry(lambda: self.client.get_run(run_id))

    def mark_stale_runs(self, *, parent_run_id: str | None = None, include_parent: bool = False) -> list[str]:
        """Mark FAILED the runs of a search that are still RUNNING though nothing runs them.

        Call it when resuming, before any trial starts (a resumed search does it itself): a run
        that is RUNNING then was left so by a driver (or worker) that was killed. Its tags say so
        (status ``failed``, reason :data:`autotune.tracking.stale.STALE_REASON`) until the trial is
        logged again.

        Args:
            parent_run_id: The search run; this tracker's own if None.
            include_parent: Mark the search run itself too.

        Returns:
            The run ids marked.
        """
        parent = parent_run_id or self._need_parent()
        return stale.mark_stale(self.client, self._child_runs(parent), parent, include_parent=include_parent)

    # -- trial runs --------------------------------------------------------------------------

    def start_trial(self, trial_id: str, *, kind: str = KIND_TRIAL, params: Mapping[str, Any] | None = None,
                    spec: LaunchSpec | None = None, run_name: str | None = None) -> str:
        """Open (or reopen) a trial's run as RUNNING before it is measured.

        Optional (:meth:`log_trial` alone creates the run too): a started run shows a running trial
        in the UI; one killed mid-way stays RUNNING until :meth:`mark_stale_runs`.

        Args:
            trial_id: The Ray trial id.
            kind: ``trial``, ``baseline`` or ``finalist``.
            params: The trial's sampled values (logged as params and ``autotune.searched_params``).
            spec: The launch, when known (its args and env are logged as params).
            run_name: The run's name; ``<kind> <trial_id> <params>`` if None.

        Returns:
            The run id.
        """
        trial_log.check_kind(kind)
        run_id = self._ensure_run(trial_id, kind, params or {}, run_name)
        retry(lambda: self.client.update_run(run_id, status="RUNNING"))
        logged = trial_log.start_params(spec, params)
        log_batch(self.client, run_id, params=new_params(self._run(run_id), logged))
        return run_id

    def log_trial(self, trial_id: str, result: TrialResult, *, kind: str | None = None,
                  spec: LaunchSpec | None = None, confirmed: bool | None = None,
                  tags: Mapping[str, str] | None = None, run_name: str | None = None,
                  finish: bool = True, attempt: int | None = None, at_ms: int | None = None,
                  drain: bool = True) -> str:
        """Log a trial's result on its nested run, creating the run or updating the existing one.

        What the run gets, and what a second log of the same trial replaces, is
        :func:`autotune.tracking.trial_log.log_result`'s.

        Args:
            trial_id: The Ray trial id (letters, digits and ``_.:@+-``).
            result: The trial's result.
            kind: ``trial``, ``baseline`` or ``finalist``; from ``result.is_baseline`` if None.
            spec: The launch; rebuilt from ``result.argv`` and ``result.env`` if None.
            confirmed: Set ``autotune.confirmed`` (a finalist re-measured and still feasible).
            tags: More tags.
            run_name: The run's name when it is created.
            finish: End the run (:func:`autotune.tracking.trial_log.run_status`: FINISHED, FAILED
                for a failed trial, KILLED for a stopped one); False leaves it RUNNING.
            attempt: The attempt's number (the spool's); the run's last plus one if None.
            at_ms: The result's time (the spool's, so a replay writes the same); now if None.
            drain: Ignored: every write here is made at once (see :meth:`drain`).

        Returns:
            The run id.
        """
        kind = kind or (KIND_BASELINE if result.is_baseline else KIND_TRIAL)
        trial_log.check_kind(kind)
        spec = spec or spec_of(result)
        run_id = self._ensure_run(trial_id, kind, result.params or {}, run_name, trial_log.run_times(result)[0])
        trial_log.log_result(self.client, run_id, trial_id, result, kind=kind, spec=spec,
                             confirmed=confirmed, tags=tags, finish=finish, attempt=attempt, at_ms=at_ms)
        return run_id

    def log_lost_attempt(self, trial_id: str, reason: str, *, attempt: int | None = None,
                         params: Mapping[str, Any] | None = None, kind: str = KIND_TRIAL) -> str:
        """Record an attempt of a trial that ended without a result (:func:`trial_log.log_lost`)."""
        run_id = self._ensure_run(trial_id, kind, params or {}, None)
        trial_log.log_lost(self.client, run_id, attempt=attempt, reason=reason)
        return run_id

    def set_confirmed(self, trial_id: str, confirmed: bool = True) -> str:
        """Tag a trial's run ``autotune.confirmed`` (export prefers them); KeyError if it has none."""
        run_id = self.find_trial_run(trial_id)
        if run_id is None:
            raise KeyError(f"trial {trial_id!r} has no run under search run {self.parent_run_id}")
        log_batch(self.client, run_id, tags={TAG_CONFIRMED: str(bool(confirmed)).lower()})
        return run_id

    def _ensure_run(self, trial_id: str, kind: str, params: Mapping[str, Any], run_name: str | None,
                    started_ms: int | None = None) -> str:
        trial_log.check_trial_id(trial_id)
        run_id = self.find_trial_run(trial_id)
        if run_id is None:
            run_id = trial_log.create_run(self.client, self._need_experiment(), self._need_parent(), trial_id,
                                          kind=kind, search=self.name, params=params, run_name=run_name,
                                          started_ms=started_ms)
            self._runs[trial_id] = run_id
        return run_id

    def log_to_search(self, *, params: Mapping[str, Any] | None = None,
                      metrics: Mapping[str, float | None] | None = None,
                      tags: Mapping[str, str] | None = None,
                      files: Mapping[str, str | os.PathLike[str]] | None = None,
                      texts: Mapping[str, str] | None = None, artifact_dir: str | None = None) -> None:
        """Log facts on the search run (:meth:`~autotune.tracking.interface.SearchTracker.log_to_search`)."""
        store.log_facts(self.client, self._need_parent(), params=params, metrics=metrics, tags=tags,
                        files=files, texts=texts, artifact_dir=artifact_dir)

    def fail_search(self, reason: str) -> None:
        """End the search's parent run FAILED, with ``reason`` as its ``autotune.reason`` tag."""
        parent = self._need_parent()
        log_batch(self.client, parent, tags={TAG_REASON: reason[:MAX_TAG]})
        retry(lambda: self.client.set_terminated(parent, status="FAILED"))

    # -- the end of a search -----------------------------------------------------------------

    def finish_search(self, *, study: Study | None = None, status: str = "FINISHED",
                      sglang_default: Mapping[str, Any] | None = None,
                      winner_files: WinnerFiles | None = None,
                      report_files: Mapping[str, str] | None = None) -> SearchSummary:
        """Summarise the search run and end it (:meth:`~autotune.tracking.interface.SearchTracker.finish_search`)."""
        return summary.finish_search(self, self._need_parent(), study=study, status=status,
                                     sglang_default=sglang_default, winner_files=winner_files,
                                     report_files=report_files)

    def drain(self, *, force: bool = False) -> int:
        """0: nothing waits, every write here is made at once (a durable tracker's may wait)."""
        return 0

    def unsynced(self) -> int:
        """0: nothing waits (see :meth:`drain`)."""
        return 0

    def load_spec(self, run_id: str) -> LaunchSpec:
        """The launch a trial run stored (its ``launch.json`` artifact).

        Raises:
            ConfigError: The run has no ``launch.json`` (it failed before it had a launch).
        """
        return store.load_spec(self.client, run_id)


__all__ = ["Tracker"]
