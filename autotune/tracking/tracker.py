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

import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from autotune.tracking.content import (MAX_PARAM, finite_number, param_text, spec_from_argv, spec_of,
                                   study_from_runs, trial_metrics, trial_params, trial_point)
from autotune.tracking.runs import (KIND_BASELINE, KIND_FINALIST, KIND_SEARCH, KIND_TRIAL, TAG_ACCEPTANCE,
                            TAG_BACKEND, TAG_CONFIRMED, TAG_SGLANG_DEFAULT, TAG_SYNTHETIC_ACCEPT,
                            TAG_IS_BASELINE, TAG_KIND, TAG_PARENT, TAG_REASON, TAG_SEARCHED,
                            TAG_OBJECTIVE, TAG_STALE_METRICS, TAG_STATUS, TAG_TRIAL_ID, TRIAL_KINDS,
                            TrialRun, Winner, objective_of, select_winner)
from autotune.cli import versions
from autotune.errors import ConfigError
from autotune.launch.spec import LaunchSpec
from autotune.trial.outcome import Status

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from autotune.trial.result import TrialResult

T = TypeVar("T")

TAG_DRIVER_HOST = "autotune.driver_host"
TAG_DRIVER_PID = "autotune.driver_pid"
TAG_SEARCH_NAME = "autotune.search"
TAG_WINNER_RUN = "autotune.winner_run_id"
TAG_WINNER_TRIAL = "autotune.winner_trial_id"
TAG_WINNER_NOTE = "autotune.winner_note"
TAG_ATTEMPT = "autotune.attempt"
STALE_REASON = "the search driver stopped before this run finished"

# MLflow's limits (mlflow.utils.validation) and log_batch's per-call maxima.
_MAX_TAG = 8000
_BATCH_METRICS, _BATCH_PARAMS, _BATCH_TAGS = 1000, 100, 100
_TRIAL_ID = re.compile(r"[A-Za-z0-9_.:@+-]{1,200}")



def default_store(root: str | os.PathLike[str] | None = None) -> tuple[str, str]:
    """The local store of a project directory: ``(tracking_uri, artifact_root)``.

    Args:
        root: The project directory; the current working directory if None.
    """
    base = Path(root if root is not None else os.getcwd()).resolve() / "mlruns"
    return f"sqlite:///{base}/mlflow.db", f"file://{base}/artifacts"


def _safe_dir(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "search"


def _is_locked(exc: BaseException) -> bool:
    return "database is locked" in str(exc)


def _retry(fn: Callable[[], T], *, attempts: int = 8) -> T:
    """Run a store call, retrying while sqlite is locked by another process."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:  # MlflowException wraps sqlalchemy's OperationalError; re-raised
            if not _is_locked(exc) or i == attempts - 1:
                raise
            time.sleep(0.05 * 2 ** i)
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------------------------
# The tracker.
# ------------------------------------------------------------------------------------------


@dataclass
class SearchSummary:
    """What :meth:`Tracker.finish_search` logged on the parent run.

    Attributes:
        parent_run_id: The search's run.
        winner: The winning run (see :func:`autotune.tracking.runs.select_winner`), None if nothing won.
        counts: ``trials``, ``baselines``, ``finalists``, ``feasible``, ``infeasible``, ``failed``.
        metrics: The summary metrics logged (unknowns left out).
        plots: Artifact paths of the plots logged.
        skipped_plots: Plot -> why it was not drawn.
        export_error: Why the winner's command could not be exported, if it could not.
    """

    parent_run_id: str
    winner: Winner | None
    counts: dict[str, int]
    metrics: dict[str, float]
    plots: list[str] = field(default_factory=list)
    skipped_plots: dict[str, str] = field(default_factory=dict)
    export_error: str | None = None


class Tracker:
    """MLflow tracking of one search (an experiment named after it).

    Build it, :meth:`connect` (fails fast with :class:`ConfigError`), then :meth:`start_search`,
    :meth:`log_trial` for each trial, and :meth:`finish_search`. Every call is a plain store
    call, safe from several processes at once (sqlite lock contention is retried).

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
            self.tracking_uri, default_artifacts = default_store(self.root)
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
        return (f"Tracker(name={self.name!r}, tracking_uri={self.tracking_uri!r}, "
                f"experiment_id={self.experiment_id!r}, parent_run_id={self.parent_run_id!r})")

    # -- connection --------------------------------------------------------------------------

    @property
    def client(self) -> MlflowClient:
        """The MLflow client (imports MLflow the first time)."""
        if self._client is None:
            if self.tracking_uri.startswith(("http://", "https://")):
                # MLflow's defaults retry for minutes; a search should fail fast and say why.
                os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
                os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
                os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
            # A progress bar on stderr for every artifact read is noise in a CLI's output.
            os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def _probe_server(self) -> None:
        import httpx

        url = self.tracking_uri.rstrip("/") + "/health"
        try:
            resp = httpx.get(url, timeout=5.0)
        except httpx.HTTPError as exc:
            raise ConfigError(
                f"the MLflow tracking server {self.tracking_uri} does not answer ({type(exc).__name__}: "
                f"{exc}); start it (mlflow server --host ... --port ...) or leave --tracking-uri out "
                "to track in the local store under mlruns/", field="tracking_uri") from None
        if resp.status_code >= 500:
            raise ConfigError(f"the MLflow tracking server {self.tracking_uri} answers {url} with HTTP "
                              f"{resp.status_code}; check the server's log", field="tracking_uri")

    def connect(self, *, create: bool = True) -> Tracker:
        """Check the store and find (or create) the experiment. Fast; nothing is logged.

        Args:
            create: Create the store and experiment if missing; False for read-only use (export).

        Returns:
            This tracker, with ``experiment_id`` set.

        Raises:
            ConfigError: The tracking server does not answer, the store cannot be opened, the
                experiment was deleted, or (``create=False``) it does not exist.
        """
        # MLflow prints "View run ... / View experiment ..." to stdout for every run it ends on a
        # tracking server: inside the live table. Set before Ray starts, so workers inherit it.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        if self.tracking_uri.startswith(("http://", "https://")):
            self._probe_server()
        if self.local:
            db = Path(self.root) / "mlruns" / "mlflow.db"
            if not create and not db.exists():
                raise ConfigError(f"no MLflow store at {db}: run a search from {self.root} first, or "
                                  "pass --tracking-uri / --root", field="tracking_uri")
            try:
                db.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot create the MLflow store directory {db.parent}: {exc}",
                                  field="tracking_uri") from None
        try:
            experiment = _retry(lambda: self.client.get_experiment_by_name(self.name))
            if experiment is None and create:
                experiment = self._create_experiment()
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - MlflowException, sqlalchemy and requests errors
            raise ConfigError(f"cannot open the MLflow store {self.tracking_uri}: "
                              f"{type(exc).__name__}: {exc}", field="tracking_uri") from None
        if experiment is None:
            raise ConfigError(f"no experiment named {self.name!r} in {self.tracking_uri}; "
                              "check --name (it is the search name)", field="name")
        if experiment.lifecycle_stage == "deleted":
            raise ConfigError(f"the experiment {self.name!r} was deleted in {self.tracking_uri}; restore "
                              f"it (mlflow experiments restore --experiment-id {experiment.experiment_id}) "
                              "or use another search name", field="name")
        self.experiment_id = experiment.experiment_id
        return self

    def _create_experiment(self) -> Any:
        from mlflow.exceptions import MlflowException

        location = f"{self.artifact_root.rstrip('/')}/{_safe_dir(self.name)}" if self.artifact_root else None
        try:
            _retry(lambda: self.client.create_experiment(self.name, artifact_location=location,
                                                         tags=_experiment_tags(self.name)))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":  # another process made it first
                raise
        return _retry(lambda: self.client.get_experiment_by_name(self.name))

    def _need_experiment(self) -> str:
        if self.experiment_id is None:
            self.connect()
        assert self.experiment_id is not None
        return self.experiment_id

    def _need_parent(self) -> str:
        if self.parent_run_id is None:
            raise RuntimeError("no search run: call start_search() (or resume) first")
        return self.parent_run_id

    # -- searching runs ----------------------------------------------------------------------

    def _search(self, filter_string: str, *, order_by: list[str] | None = None,
                limit: int | None = None) -> list[Any]:
        experiment = self._need_experiment()
        runs: list[Any] = []
        token = None
        while True:
            page = _retry(lambda token=token: self.client.search_runs(
                [experiment], filter_string=filter_string, max_results=min(limit or 1000, 1000),
                order_by=order_by, page_token=token))
            runs.extend(page)
            token = page.token
            if not token or (limit is not None and len(runs) >= limit):
                return runs[:limit] if limit else runs

    def parent_runs(self) -> list[Any]:
        """The experiment's search runs, newest first (MLflow ``Run`` objects)."""
        return self._search(f"tags.`{TAG_KIND}` = '{KIND_SEARCH}'", order_by=["attributes.start_time DESC"])

    def latest_parent_run_id(self) -> str | None:
        """The newest search run of this experiment, None if there is none."""
        runs = self._search(f"tags.`{TAG_KIND}` = '{KIND_SEARCH}'",
                            order_by=["attributes.start_time DESC"], limit=1)
        return runs[0].info.run_id if runs else None

    def _child_runs(self, parent_run_id: str) -> list[Any]:
        return self._search(f"tags.`{TAG_PARENT}` = '{parent_run_id}'",
                            order_by=["attributes.start_time ASC"])

    def trial_runs(self, parent_run_id: str | None = None) -> list[TrialRun]:
        """Every trial, baseline and finalist run of a search, oldest first.

        Args:
            parent_run_id: The search run; this tracker's own if None.
        """
        parent = parent_run_id or self._need_parent()
        return [TrialRun.from_run(r) for r in self._child_runs(parent)
                if r.data.tags.get(TAG_KIND) in TRIAL_KINDS]

    def find_trial_run(self, trial_id: str) -> str | None:
        """The run id of a trial under this search, None if it has none yet."""
        _check_trial_id(trial_id)
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
                     run_name: str | None = None, objective: tuple[str, str] | None = None) -> str:
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
            resume: Continue the newest search run instead of starting one.
            run_name: The parent run's name; ``<name>`` with a timestamp if None.
            objective: ``(metric, direction)`` the search ranks by, tagged as
                ``autotune.objective`` so that the winner tags and the export rank the same way.

        Returns:
            The parent run id (also kept as ``self.parent_run_id``).
        """
        experiment = self._need_experiment()
        all_params: dict[str, Any] = {
            "space_path": str(Path(space_path).resolve()) if space_path else None, "backend": backend,
            "profile": profile, "budget": budget, "seed": seed, "sampler": sampler,
            "ray_address": ray_address, **{f"version_{k}": v for k, v in versions().items()},
            **dict(params or {})}
        driver = {TAG_DRIVER_HOST: socket.gethostname(), TAG_DRIVER_PID: str(os.getpid())}
        parent = self.latest_parent_run_id() if resume else None
        if parent is None:
            for run in self.parent_runs():
                if run.info.status == "RUNNING" and not _driver_alive(run.data.tags):
                    self.mark_stale_runs(parent_run_id=run.info.run_id, include_parent=True)
            tags = {TAG_KIND: KIND_SEARCH, TAG_SEARCH_NAME: self.name, **driver}
            if objective is not None:
                tags[TAG_OBJECTIVE] = f"{objective[0]}:{objective[1]}"
            if backend:
                tags[TAG_BACKEND] = backend
            name = run_name or f"{self.name} {time.strftime('%Y-%m-%d %H:%M:%S')}"
            run = _retry(lambda: self.client.create_run(experiment, tags=tags, run_name=name))
            parent = run.info.run_id
        else:
            self.parent_run_id = parent
            self.mark_stale_runs()
            _retry(lambda: self.client.update_run(parent, status="RUNNING"))
            self._log_batch(parent, tags={**driver, "autotune.resumed": "true"})
        self.parent_run_id = parent
        self._runs = {}
        self._log_batch(parent, params=_new_params(self._run(parent), all_params))
        if space_path and Path(space_path).is_file():
            _retry(lambda: self.client.log_artifact(parent, str(space_path), "space"))
        return parent

    def _run(self, run_id: str) -> Any:
        return _retry(lambda: self.client.get_run(run_id))

    def mark_stale_runs(self, *, parent_run_id: str | None = None, include_parent: bool = False) -> list[str]:
        """Mark FAILED the runs of a search that are still RUNNING though nothing runs them.

        Call it when resuming, before any trial starts (a resumed search does it itself): a run
        that is RUNNING then was left so by a driver (or worker) that was killed. Its tags say so
        (status ``failed``, reason :data:`STALE_REASON`) until the trial is logged again.

        Args:
            parent_run_id: The search run; this tracker's own if None.
            include_parent: Mark the search run itself too.

        Returns:
            The run ids marked.
        """
        parent = parent_run_id or self._need_parent()
        marked = []
        for run in self._child_runs(parent):
            if run.info.status == "RUNNING":
                run_id = run.info.run_id
                self._log_batch(run_id, tags={TAG_STATUS: "failed", TAG_REASON: STALE_REASON,
                                              "autotune.stale": "true"})
                _retry(lambda run_id=run_id: self.client.set_terminated(run_id, status="FAILED"))
                marked.append(run_id)
        if include_parent and self._run(parent).info.status == "RUNNING":
            self._log_batch(parent, tags={"autotune.stale": "true", TAG_REASON: STALE_REASON})
            _retry(lambda: self.client.set_terminated(parent, status="FAILED"))
            marked.append(parent)
        return marked

    # -- trial runs --------------------------------------------------------------------------

    def start_trial(self, trial_id: str, *, kind: str = KIND_TRIAL, params: Mapping[str, Any] | None = None,
                    spec: LaunchSpec | None = None, run_name: str | None = None) -> str:
        """Open (or reopen) a trial's run as RUNNING before it is measured.

        Optional: :meth:`log_trial` alone creates the run too. Starting it first makes a running
        trial visible in the UI, and a trial killed mid-way stays RUNNING until
        :meth:`mark_stale_runs`.

        Args:
            trial_id: The Ray trial id.
            kind: ``trial``, ``baseline`` or ``finalist``.
            params: The trial's sampled values (logged as params and ``autotune.searched_params``).
            spec: The launch, when known (its args and env are logged as params).
            run_name: The run's name; ``<kind> <trial_id> <params>`` if None.

        Returns:
            The run id.
        """
        _check_kind(kind)
        run_id = self._ensure_run(trial_id, kind, params or {}, run_name)
        _retry(lambda: self.client.update_run(run_id, status="RUNNING"))
        logged = {}
        if spec is not None:
            logged["model_path"] = spec.model_path
            logged.update({k: param_text(v) for k, v in spec.server_args.items() if v is not None})
            logged.update(spec.env)
        logged.update({k: param_text(v) for k, v in (params or {}).items() if v is not None})
        self._log_batch(run_id, params=_new_params(self._run(run_id), logged))
        return run_id

    def log_trial(self, trial_id: str, result: TrialResult, *, kind: str | None = None,
                  spec: LaunchSpec | None = None, confirmed: bool | None = None,
                  tags: Mapping[str, str] | None = None, run_name: str | None = None,
                  finish: bool = True) -> str:
        """Log a trial's result on its nested run, creating the run or updating the existing one.

        The run gets params (every server arg and env var of the launch), the known metrics
        (:func:`trial_metrics`), the status and reason tags, and the artifacts ``launch.sh``,
        ``launch.json`` (what export reads), ``result.json``, ``phases.json``, ``phases.png``,
        ``server_log_tail.txt`` and ``requests.jsonl`` (each only when there is something to put in
        it). A run logged again keeps one run: tags and artifacts are replaced, metrics get a new
        step, and metrics the new result does not know are listed in ``autotune.stale_metrics`` so
        readers ignore their old values.

        Args:
            trial_id: The Ray trial id (letters, digits and ``_.:@+-``).
            result: The trial's result.
            kind: ``trial``, ``baseline`` or ``finalist``; from ``result.is_baseline`` if None.
            spec: The launch; rebuilt from ``result.argv`` and ``result.env`` if None.
            confirmed: Set ``autotune.confirmed`` (a finalist re-measured and still feasible).
            tags: More tags.
            run_name: The run's name when it is created.
            finish: End the run (FINISHED, or FAILED for a failed trial); False leaves it RUNNING.

        Returns:
            The run id.
        """
        kind = kind or (KIND_BASELINE if result.is_baseline else KIND_TRIAL)
        _check_kind(kind)
        spec = spec or spec_of(result)
        run_id = self._ensure_run(trial_id, kind, result.params or {}, run_name)
        existing = self._run(run_id)
        attempt = int(existing.data.tags.get(TAG_ATTEMPT, "0")) + 1
        metrics = trial_metrics(result)
        stale = sorted(set(existing.data.metrics) - set(metrics) - {"output_tok_s_repeat"})
        run_tags = {
            TAG_KIND: kind, TAG_STATUS: result.status, TAG_REASON: (result.reason or "")[:_MAX_TAG],
            TAG_IS_BASELINE: str(bool(result.is_baseline)).lower(), TAG_ATTEMPT: str(attempt),
            TAG_SEARCHED: json.dumps(sorted(result.params or {})),
            TAG_STALE_METRICS: json.dumps(stale),
            "mlflow.note.content": _note(result)[:_MAX_TAG],
        }
        if result.feasible is not None:
            run_tags["autotune.feasible"] = str(bool(result.feasible)).lower()
        if result.failure:
            run_tags["autotune.failure"] = result.failure
        if result.slo_violations:
            run_tags["autotune.slo_violations"] = "; ".join(result.slo_violations)[:_MAX_TAG]
        if spec is not None:
            run_tags[TAG_BACKEND] = spec.backend
        if result.phases and "device_timer" in result.phases:
            run_tags["autotune.device_timer"] = str(bool(result.phases["device_timer"])).lower()
        if confirmed is not None:
            run_tags[TAG_CONFIRMED] = str(bool(confirmed)).lower()
        if result.acceptance is not None:
            run_tags[TAG_ACCEPTANCE] = result.acceptance
        if result.synthetic_accept_length is not None:
            run_tags[TAG_SYNTHETIC_ACCEPT] = f"{result.synthetic_accept_length:g}"
        run_tags.update(tags or {})
        now = int(time.time() * 1000)
        from mlflow.entities import Metric

        metric_list = [Metric(k, v, now, attempt - 1) for k, v in metrics.items()]
        metric_list += [Metric("output_tok_s_repeat", float(v), now, i)
                        for i, v in enumerate(result.output_tok_s_repeats or []) if finite_number(v) is not None]
        self._log_batch(run_id, metrics=metric_list, tags=run_tags,
                        params=_new_params(existing, trial_params(result, spec)))
        self._log_trial_artifacts(run_id, trial_id, result, spec)
        if finish:
            status = "FAILED" if result.status == Status.FAILED else "FINISHED"
            _retry(lambda: self.client.set_terminated(run_id, status=status))
        return run_id

    def set_confirmed(self, trial_id: str, confirmed: bool = True) -> str:
        """Tag a trial's run ``autotune.confirmed`` (export prefers confirmed runs).

        Raises:
            KeyError: The trial has no run under this search.
        """
        run_id = self.find_trial_run(trial_id)
        if run_id is None:
            raise KeyError(f"trial {trial_id!r} has no run under search run {self.parent_run_id}")
        self._log_batch(run_id, tags={TAG_CONFIRMED: str(bool(confirmed)).lower()})
        return run_id

    def _ensure_run(self, trial_id: str, kind: str, params: Mapping[str, Any], run_name: str | None) -> str:
        _check_trial_id(trial_id)
        run_id = self.find_trial_run(trial_id)
        if run_id is not None:
            return run_id
        parent = self._need_parent()
        label = " ".join(f"{k}={v}" for k, v in params.items() if v is not None)
        name = run_name or f"{kind} {trial_id}" + (f" {label}" if label else "")
        tags = {TAG_PARENT: parent, TAG_TRIAL_ID: trial_id, TAG_KIND: kind, TAG_SEARCH_NAME: self.name}
        run = _retry(lambda: self.client.create_run(self._need_experiment(), tags=tags, run_name=name[:250]))
        self._runs[trial_id] = run.info.run_id
        return run.info.run_id

    def _log_trial_artifacts(self, run_id: str, trial_id: str, result: TrialResult,
                             spec: LaunchSpec | None) -> None:
        from autotune.tracking import _plots

        with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
            out = Path(tmp)
            command = spec.shell_command() if spec is not None else result.launch_command
            if command:
                (out / "launch.sh").write_text("#!/usr/bin/env bash\n" + command)
            if spec is not None:
                (out / "launch.json").write_text(json.dumps(spec.to_json(), indent=2))
            (out / "result.json").write_text(json.dumps(result.to_dict(), indent=2, default=str))
            if result.phases:
                (out / "phases.json").write_text(json.dumps(result.phases, indent=2, default=str))
                # A picture is a convenience: a plotting library that cannot draw here (seen on
                # the GPU machine) must not cost the trial, which Ray would then run again.
                try:
                    fig = _plots.phase_figure(result.phases, title=f"{trial_id} ({result.status})")
                    if fig is not None:
                        fig.savefig(out / "phases.png", dpi=100)
                except Exception as exc:  # noqa: BLE001 - any plotting failure
                    (out / "phases_png_error.txt").write_text(f"{type(exc).__name__}: {exc}\n")
            if result.log_tail:
                (out / "server_log_tail.txt").write_text(result.log_tail)
            if result.records:
                with open(out / "requests.jsonl", "w") as fh:
                    fh.writelines(json.dumps(record, default=str) + "\n" for record in result.records)
            _retry(lambda: self.client.log_artifacts(run_id, tmp))

    def _log_batch(self, run_id: str, *, metrics: list[Any] = (), params: Mapping[str, str] | None = None,
                   tags: Mapping[str, str] | None = None) -> None:
        from mlflow.entities import Param, RunTag

        param_list = [Param(k, v) for k, v in (params or {}).items()]
        tag_list = [RunTag(k, str(v)[:_MAX_TAG]) for k, v in (tags or {}).items()]
        metrics = list(metrics)
        while metrics or param_list or tag_list:
            chunk_m, metrics = metrics[:_BATCH_METRICS], metrics[_BATCH_METRICS:]
            chunk_p, param_list = param_list[:_BATCH_PARAMS], param_list[_BATCH_PARAMS:]
            chunk_t, tag_list = tag_list[:_BATCH_TAGS], tag_list[_BATCH_TAGS:]
            _retry(lambda m=chunk_m, p=chunk_p, t=chunk_t: self.client.log_batch(run_id, metrics=m, params=p,
                                                                                 tags=t))

    def log_to_search(self, *, params: Mapping[str, Any] | None = None,
                      metrics: Mapping[str, float | None] | None = None,
                      tags: Mapping[str, str] | None = None,
                      files: Mapping[str, str | os.PathLike[str]] | None = None,
                      texts: Mapping[str, str] | None = None, artifact_dir: str | None = None) -> None:
        """Log extra facts on the search's parent run (the NCCL pre-screen, say).

        Args:
            params: Params (None values left out; a param already logged keeps its value).
            metrics: Metrics; None and non-finite values are left out (unknown is not 0).
            tags: Tags.
            files: Artifact name -> local file to copy.
            texts: Artifact name -> text content.
            artifact_dir: Folder of the artifacts in the run.
        """
        parent = self._need_parent()
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metric_list = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()
                       if finite_number(v) is not None]
        new = _new_params(self._run(parent), {k: v for k, v in (params or {}).items()
                                              if v is not None})
        self._log_batch(parent, metrics=metric_list, params=new, tags=dict(tags or {}))
        if files or texts:
            with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
                for name, path in (files or {}).items():
                    Path(tmp, name).write_bytes(Path(path).read_bytes())
                for name, text in (texts or {}).items():
                    Path(tmp, name).write_text(text)
                _retry(lambda: self.client.log_artifacts(parent, tmp, artifact_dir))

    def fail_search(self, reason: str) -> None:
        """End the search's parent run FAILED, with ``reason`` as its ``autotune.reason`` tag."""
        parent = self._need_parent()
        self._log_batch(parent, tags={TAG_REASON: reason[:_MAX_TAG]})
        _retry(lambda: self.client.set_terminated(parent, status="FAILED"))

    # -- the end of a search -----------------------------------------------------------------

    def finish_search(self, *, study: Any = None, status: str = "FINISHED",
                      sglang_default: Mapping[str, Any] | None = None,
                      winner_files: Callable[[Tracker, Winner], Mapping[str, str]] | None = None,
                      ) -> SearchSummary:
        """Summarise the search on its parent run and end it.

        Reads every trial run back from the store (so trials logged by workers count), picks the
        winner (:func:`autotune.tracking.runs.select_winner`), and logs: summary metrics (winner tok/s,
        speedup and accept length, baseline tok/s, counts), the winner's run and trial ids as tags,
        the files ``winner_files`` renders for the winner under ``winner/``, and the plots under ``plots/``: tok/s against steps by topk,
        accept length against break-even, and Optuna's parameter importance, parallel-coordinate
        and slice views (of ``study``, or of a study rebuilt from the runs).

        Args:
            study: The search's ``optuna.Study``, if it has one.
            status: The parent run's final MLflow status (``FINISHED``, ``FAILED``, ``KILLED``).
            sglang_default: SGLang's default speculative config as the search measured it
                (:func:`autotune.space.warm_start.compare_to_default`): logged as the tag
                ``autotune.sglang_default`` and the metrics ``sglang_default_output_tok_s`` and
                ``gain_over_sglang_default`` (left out when unknown).
            winner_files: ``(tracker, winner) -> {file name: text}``, logged under ``winner/``
                (the search passes :func:`autotune.export.command.winner_files`: the real-SGLang
                launch as ``launch.sh``, ``config.yaml`` and ``launch.json``). An error it raises is
                logged as the tag ``autotune.export_error`` and loses nothing else.
        """
        parent = self._need_parent()
        runs = self.trial_runs(parent)
        metric, maximize = objective_of(self._run(parent).data.tags)
        winner = select_winner(runs, objective=metric, maximize=maximize)
        counts = {
            "trials": sum(r.kind == KIND_TRIAL for r in runs),
            "baselines": sum(r.kind == KIND_BASELINE for r in runs),
            "finalists": sum(r.kind == KIND_FINALIST for r in runs),
            "feasible": sum(r.status == Status.FEASIBLE for r in runs),
            "infeasible": sum(r.status == Status.INFEASIBLE for r in runs),
            "failed": sum(r.status == Status.FAILED for r in runs),
        }
        metrics: dict[str, float] = {f"{k}_total": float(v) for k, v in counts.items()}
        tags: dict[str, str] = {}
        if winner is not None:
            for name, value in (("winner_output_tok_s", winner.output_tok_s),
                                ("winner_speedup", winner.speedup),
                                ("winner_accept_length", winner.accept_length),
                                ("baseline_tok_s", winner.baseline_tok_s)):
                if finite_number(value) is not None:
                    metrics[name] = float(value)
            tags = {TAG_WINNER_RUN: winner.run.run_id, TAG_WINNER_TRIAL: winner.run.trial_id or "",
                    TAG_WINNER_NOTE: winner.note,
                    "autotune.winner_is_baseline": str(winner.is_baseline).lower()}
        else:
            tags = {TAG_WINNER_NOTE: "no feasible trial: nothing to export"}
        if sglang_default is not None:
            tags[TAG_SGLANG_DEFAULT] = json.dumps(sglang_default, default=str, sort_keys=True)
            for name, value in (("sglang_default_output_tok_s", sglang_default.get("output_tok_s")),
                                ("sglang_default_speedup", sglang_default.get("speedup")),
                                ("gain_over_sglang_default", sglang_default.get("gain"))):
                if finite_number(value) is not None:
                    metrics[name] = float(value)
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._log_batch(parent, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()], tags=tags)
        summary = SearchSummary(parent_run_id=parent, winner=winner, counts=counts, metrics=metrics)
        self._log_plots(parent, runs, study, winner, summary)
        if winner is not None and winner_files is not None:
            summary.export_error = self._log_winner_command(parent, winner, winner_files)
        _retry(lambda: self.client.set_terminated(parent, status=status))
        return summary

    def _log_plots(self, parent: str, runs: list[TrialRun], study: Any, winner: Winner | None,
                   summary: SearchSummary) -> None:
        from autotune.tracking import _plots

        points = [trial_point(r) for r in runs if not r.is_baseline]
        base = winner.baseline_tok_s if winner is not None else None
        figures, skipped = {}, {}
        # As for a trial's picture: a plotting failure is a skipped plot with its reason.
        for stem, draw in (("tok_s_by_steps", lambda: _plots.tok_s_by_steps_figure(points, baseline_tok_s=base)),
                           ("accept_vs_break_even", lambda: _plots.accept_vs_break_even_figure(points))):
            try:
                fig = draw()
            except Exception as exc:  # noqa: BLE001 - any plotting failure
                skipped[stem] = f"could not draw it: {type(exc).__name__}: {exc}"
                continue
            if fig is None:
                skipped[stem] = "no trial has the figures it plots"
            else:
                figures[stem] = fig
        if study is None:
            study = study_from_runs(runs)
        if study is None:
            skipped.update({k: "no study and too few trial runs to rebuild one"
                            for k in ("param_importances", "parallel_coordinate", "slice")})
        else:
            try:
                more, why = _plots.optuna_figures(study)
            except Exception as exc:  # noqa: BLE001
                more, why = {}, {k: f"could not draw it: {type(exc).__name__}: {exc}"
                                 for k in ("param_importances", "parallel_coordinate", "slice")}
            figures.update(more)
            skipped.update(why)
        with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
            for stem, fig in figures.items():
                fig.savefig(Path(tmp) / f"{stem}.png", dpi=100)
                summary.plots.append(f"plots/{stem}.png")
            if skipped:
                (Path(tmp) / "skipped.json").write_text(json.dumps(skipped, indent=2))
            _retry(lambda: self.client.log_artifacts(parent, tmp, "plots"))
        summary.skipped_plots = skipped

    def _log_winner_command(self, parent: str, winner: Winner,
                            winner_files: Callable[[Tracker, Winner], Mapping[str, str]]) -> str | None:
        try:
            files = dict(winner_files(self, winner))
        except Exception as exc:  # noqa: BLE001 - a bad stored launch must not lose the summary
            error = f"{type(exc).__name__}: {exc}"
            self._log_batch(parent, tags={"autotune.export_error": error})
            return error
        with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
            for name, text in files.items():
                (Path(tmp) / name).write_text(text)
            _retry(lambda: self.client.log_artifacts(parent, tmp, "winner"))
        return None

    def load_spec(self, run_id: str) -> LaunchSpec:
        """The launch a trial run stored (its ``launch.json`` artifact).

        Raises:
            ConfigError: The run has no ``launch.json`` (it failed before it had a launch).
        """
        with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
            try:
                path = _retry(lambda: self.client.download_artifacts(run_id, "launch.json", tmp))
                data = json.loads(Path(path).read_text())
            except Exception as exc:  # noqa: BLE001 - missing artifact (MlflowException, OSError) or bad JSON
                raise ConfigError(f"run {run_id} has no readable launch.json artifact ({type(exc).__name__}: "
                                  f"{exc})", field="run_id") from None
        return LaunchSpec.from_json(data)


def _experiment_tags(name: str) -> dict[str, str]:
    # MLflow 3's UI opens an experiment in its GenAI (traces) view unless told it holds runs.
    return {TAG_SEARCH_NAME: name, "mlflow.experimentKind": "custom_model_development",
            "mlflow.note.content": f"autotune search **{name}**: one parent run per search, one nested "
                                   "run per trial, baseline and finalist."}


def _new_params(run: Any, params: Mapping[str, Any]) -> dict[str, str]:
    """Params the run does not have yet (MLflow params cannot change once logged)."""
    have = run.data.params
    return {k: str(v)[:MAX_PARAM] for k, v in params.items() if v is not None and k not in have}


def _note(result: TrialResult) -> str:
    lines = [f"**{result.status}**" + (f": {result.reason}" if result.reason else "")]
    if result.status == Status.FAILED and result.log_tail:
        tail = "\n".join(result.log_tail.splitlines()[-20:])
        lines.append("Server log tail (full tail in server_log_tail.txt):\n\n```\n" + tail + "\n```")
    return "\n\n".join(lines)


def _check_trial_id(trial_id: str) -> None:
    if not isinstance(trial_id, str) or not _TRIAL_ID.fullmatch(trial_id):
        raise ValueError(f"trial id {trial_id!r} must be 1-200 letters, digits or _.:@+- characters")


def _check_kind(kind: str) -> None:
    if kind not in TRIAL_KINDS:
        raise ValueError(f"run kind {kind!r} is unknown; use one of {', '.join(TRIAL_KINDS)}")


def _driver_alive(tags: Mapping[str, str]) -> bool:
    """Whether a search run's driver may still be running (unknown counts as alive)."""
    if tags.get(TAG_DRIVER_HOST) != socket.gethostname():
        return True
    try:
        os.kill(int(tags.get(TAG_DRIVER_PID, "")), 0)
    except ValueError:
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["STALE_REASON", "SearchSummary", "Tracker", "TrialRun", "Winner", "default_store",
           "select_winner", "spec_from_argv", "spec_of", "study_from_runs", "trial_metrics",
           "trial_params", "versions"]
