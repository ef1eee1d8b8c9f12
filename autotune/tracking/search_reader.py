"""Reading a search's recorded runs back: the one place export (and nothing else) reads them.

A search records its runs in MLflow (:mod:`autotune.tracking.tracker`); export reads them back to
find the winner (by the one policy, :func:`autotune.tracking.runs.select_winner`) and its stored
launch. Two readers give the same answer:

- :class:`SqliteReader` reads a local sqlite store (the default ``mlruns/mlflow.db``, or
  ``--tracking-uri sqlite:///PATH``) read-only with :mod:`sqlite3`, and a run's ``launch.json`` from
  its ``file://`` artifact folder. It does not import MLflow, whose import alone costs about 3 s
  on a loaded 2-core box: what makes ``autotune export`` answer in under 3 s.
- :class:`MlflowReader` reads through MLflow's client: a tracking server (``http://...``), any other
  store, and every case the sqlite reader cannot read (a store it cannot open, a run whose
  artifacts are not local files: each falls back here, so the answer never differs).

:func:`open_reader` picks one. Both return :class:`StoredRun` (what an MLflow ``Run`` holds that
export reads), so the rest of export cannot tell them apart; ``tests/unit/tracking/test_search_reader.py``
holds them to byte-identical exports of the same store. The sqlite reader reads MLflow's tables as
MLflow's own SQL store does (``mlflow.store.tracking.sqlalchemy_store``): runs ordered by start time,
then run id; a NaN metric is ``is_nan``; deleted runs are left out of searches.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlsplit

from autotune.errors import ConfigError
from autotune.launch.spec import LaunchSpec
from autotune.tracking import store
from autotune.tracking.runs import KIND_SEARCH, TAG_KIND, TAG_PARENT, RunLike, TrialRun, trial_runs_of
from autotune.tracking.tracker import Tracker

if TYPE_CHECKING:
    from mlflow.entities import Run


@dataclass(frozen=True)
class StoredRunInfo:
    """What export reads of an MLflow ``RunInfo``."""

    run_id: str
    experiment_id: str
    status: str
    start_time: int | None


@dataclass(frozen=True)
class StoredRunData:
    """What export reads of an MLflow ``RunData``: latest metric values, params and tags."""

    metrics: Mapping[str, float]
    params: Mapping[str, str]
    tags: Mapping[str, str]


@dataclass(frozen=True)
class StoredRun:
    """One run as a search recorded it (shaped as an MLflow ``Run``: ``info`` and ``data``)."""

    info: StoredRunInfo
    data: StoredRunData

    @classmethod
    def of(cls, run: Run) -> StoredRun:
        """The fields export reads of an ``mlflow.entities.Run``."""
        return cls(StoredRunInfo(run_id=run.info.run_id, experiment_id=str(run.info.experiment_id),
                                 status=run.info.status, start_time=run.info.start_time),
                   StoredRunData(metrics=dict(run.data.metrics), params=dict(run.data.params),
                                 tags=dict(run.data.tags)))


class LaunchSource(Protocol):
    """Whatever can give a trial run's stored launch (a reader, or a :class:`Tracker` at a search's end)."""

    def load_spec(self, run_id: str) -> LaunchSpec:
        """The run's ``launch.json``.

        Raises:
            ConfigError: The run has none (it failed before it had a launch).
        """
        ...


class SearchReader(LaunchSource, Protocol):
    """A search's recorded runs, read-only."""

    @property
    def name(self) -> str:
        """The search name (its MLflow experiment)."""
        ...

    @property
    def tracking_uri(self) -> str:
        """The store's URI, as messages name it."""
        ...

    @property
    def experiment_id(self) -> str:
        """The search's experiment."""
        ...

    def latest_search_run_id(self) -> str | None:
        """The newest search run of the experiment, None if there is none."""
        ...

    def get_run(self, run_id: str) -> StoredRun:
        """Any run of the store by id.

        Raises:
            ConfigError: The store has no such run.
        """
        ...

    def trial_runs(self, parent_run_id: str) -> list[TrialRun]:
        """Every trial, baseline and finalist run of a search run, oldest first."""
        ...


def no_run(run_id: str, tracking_uri: str) -> ConfigError:
    """The error for a run id the store does not hold (both readers say it in these words)."""
    return ConfigError(f"no run {run_id} in {tracking_uri}", field="run_id")


class MlflowReader:
    """A search's runs through MLflow's client (imports MLflow): any store MLflow can open.

    Args:
        tracker: A tracker of the search, :meth:`~Tracker.connect`-ed with ``create=False``.
    """

    def __init__(self, tracker: Tracker) -> None:
        if tracker.experiment_id is None:
            raise ValueError("connect the tracker (create=False) before reading through it")
        self.tracker = tracker
        self.name = tracker.name
        self.tracking_uri = tracker.tracking_uri
        self.experiment_id: str = tracker.experiment_id

    def latest_search_run_id(self) -> str | None:
        return self.tracker.latest_parent_run_id()

    def get_run(self, run_id: str) -> StoredRun:
        try:
            run = store.retry(lambda: self.tracker.client.get_run(run_id))
        except Exception as exc:  # noqa: BLE001 - MlflowException RESOURCE_DOES_NOT_EXIST and friends
            # Not there, or not even a run id ("../x"): no such run either way, as the sqlite reader says.
            if getattr(exc, "error_code", None) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise no_run(run_id, self.tracking_uri) from None
            raise ConfigError(f"cannot read run {run_id} in {self.tracking_uri} ({type(exc).__name__})",
                              field="run_id") from None
        return StoredRun.of(run)

    def trial_runs(self, parent_run_id: str) -> list[TrialRun]:
        return self.tracker.trial_runs(parent_run_id)

    def load_spec(self, run_id: str) -> LaunchSpec:
        return self.tracker.load_spec(run_id)


class Unreadable(Exception):
    """The sqlite reader cannot read this store or run: the MLflow reader reads it instead."""


class SqliteReader:
    """A search's runs in a local sqlite store, read-only, without MLflow.

    Args:
        name: The search name.
        db: The store's sqlite file.
        tracking_uri: Its URI (for messages, and for MLflow when an artifact is not a local file).

    Raises:
        Unreadable: The file does not open as an MLflow store with every table and column read here
            (another database, a schema this reader does not know): MLflow's reader reads it instead.
        ConfigError: The store has no experiment ``name``, or it was deleted (MLflow's words).
    """

    #: Every table and column read here, checked when the reader is made (a store of another
    #: schema falls back to MLflow's reader then, never halfway through an export).
    SCHEMA = {"experiments": "experiment_id, name, lifecycle_stage",
              "runs": "run_uuid, experiment_id, status, start_time, lifecycle_stage, artifact_uri",
              "latest_metrics": "run_uuid, key, value, is_nan", "params": "run_uuid, key, value",
              "tags": "run_uuid, key, value"}

    def __init__(self, name: str, db: Path, *, tracking_uri: str) -> None:
        self.name = name
        self.tracking_uri = tracking_uri
        self._db = db
        self._checked = False
        with self._query() as con:
            for table, columns in self.SCHEMA.items():
                con.execute(f"SELECT {columns} FROM {table} LIMIT 0")
            row = con.execute("SELECT experiment_id, lifecycle_stage FROM experiments WHERE name = ?",
                              (name,)).fetchone()
        self._checked = True
        self.experiment_id = store.checked_experiment(
            None if row is None else (str(row[0]), row[1]), name, tracking_uri=tracking_uri)

    @contextlib.contextmanager
    def _query(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection. A sqlite error while the reader is made is :class:`Unreadable`
        (MLflow's reader reads the store instead); later (locked for 30 s, the file gone) a
        :class:`ConfigError` that says so."""
        try:
            con = sqlite3.connect(f"{self._db.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from exc
        try:
            yield con
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from exc
        finally:
            con.close()

    def _unreadable(self, exc: sqlite3.Error) -> Exception:
        if not self._checked:
            return Unreadable(f"{self._db}: {exc}")
        return ConfigError(f"cannot read the MLflow store {self.tracking_uri}: {type(exc).__name__}: {exc}",
                           field="tracking_uri")

    def latest_search_run_id(self) -> str | None:
        with self._query() as con:
            row = con.execute(
                "SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active' AND t.key = ? AND t.value = ? "
                "ORDER BY r.start_time DESC, r.run_uuid LIMIT 1",
                (int(self.experiment_id), TAG_KIND, KIND_SEARCH)).fetchone()
        return None if row is None else str(row[0])

    def get_run(self, run_id: str) -> StoredRun:
        with self._query() as con:
            runs = self._runs(con, "r.run_uuid = ?", (run_id,))
        if not runs:
            raise no_run(run_id, self.tracking_uri)
        return runs[0]

    def trial_runs(self, parent_run_id: str) -> list[TrialRun]:
        with self._query() as con:
            children = self._runs(
                con, "r.experiment_id = ? AND r.lifecycle_stage = 'active' AND r.run_uuid IN "
                     "(SELECT run_uuid FROM tags WHERE key = ? AND value = ?) ORDER BY r.start_time, r.run_uuid",
                (int(self.experiment_id), TAG_PARENT, parent_run_id))
        return trial_runs_of(children)

    def load_spec(self, run_id: str) -> LaunchSpec:
        """The run's ``launch.json`` from its local artifact folder; through MLflow when the
        artifacts are elsewhere or the file is not there (MLflow then says why, in its words)."""
        with self._query() as con:
            row = con.execute("SELECT artifact_uri FROM runs WHERE run_uuid = ?", (run_id,)).fetchone()
        uri = urlsplit(row[0] if row is not None and row[0] else "")
        path = Path(unquote(uri.path)) / "launch.json"
        if uri.scheme == "file" and uri.netloc in ("", "localhost") and path.is_file():
            try:
                return LaunchSpec.from_json(json.loads(path.read_text()))
            except (OSError, ValueError, TypeError, KeyError):
                pass  # MLflow's read below says what is wrong with it
        return store.load_spec(store.make_client(self.tracking_uri), run_id)

    @staticmethod
    def _runs(con: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> list[StoredRun]:
        """The runs matching ``where`` (SQL over ``runs r``), in its order, with metrics, params and tags."""
        rows = con.execute(f"SELECT r.run_uuid, r.experiment_id, r.status, r.start_time FROM runs r WHERE {where}",
                           args).fetchall()
        ids = [str(r[0]) for r in rows]
        metrics: dict[str, dict[str, float]] = {i: {} for i in ids}
        params: dict[str, dict[str, str]] = {i: {} for i in ids}
        tags: dict[str, dict[str, str]] = {i: {} for i in ids}
        for start in range(0, len(ids), 500):  # under sqlite's bound-variable limit
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for run_id, key, value, is_nan in con.execute(
                    f"SELECT run_uuid, key, value, is_nan FROM latest_metrics WHERE run_uuid IN ({marks})", chunk):
                metrics[run_id][key] = float("nan") if is_nan else float(value)
            for table, into in (("params", params), ("tags", tags)):
                for run_id, key, value in con.execute(
                        f"SELECT run_uuid, key, value FROM {table} WHERE run_uuid IN ({marks})", chunk):
                    into[run_id][key] = value
        return [StoredRun(StoredRunInfo(run_id=i, experiment_id=str(exp), status=status, start_time=start_ms),
                          StoredRunData(metrics=metrics[i], params=params[i], tags=tags[i]))
                for i, (_, exp, status, start_ms) in zip(ids, rows, strict=True)]


def sqlite_file(tracking_uri: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` tracking URI, None for any other URI (or one with options)."""
    if not tracking_uri.startswith("sqlite:///") or "?" in tracking_uri:
        return None
    return Path(tracking_uri.removeprefix("sqlite:///"))


def open_reader(name: str, *, root: str | None = None, tracking_uri: str | None = None,
                fast: bool = True) -> SearchReader:
    """The reader of a search's recorded runs: the sqlite one where it reads the store, else MLflow's.

    Args:
        name: The search name (its MLflow experiment).
        root: The project directory of the local store (None: the working directory).
        tracking_uri: The MLflow store (None: the local one under ``root``).
        fast: False: always MLflow's reader (the benchmark's and the tests' comparison).

    Raises:
        ConfigError: No store, no such experiment, or the store cannot be opened (the same words
            from either reader).
        StoreUnreachable: A tracking server does not answer.
    """
    tracker = Tracker(name, root=root, tracking_uri=tracking_uri)
    if fast:
        db = sqlite_file(tracker.tracking_uri)
        if tracker.local:
            store.prepare_local(tracker.root, create=False)  # "no MLflow store at ...", as connect says
        if db is not None and db.is_file():
            try:
                return SqliteReader(name, db, tracking_uri=tracker.tracking_uri)
            except Unreadable:
                pass  # MLflow opens it, or says why it cannot
    return MlflowReader(tracker.connect(create=False))


__all__ = ["LaunchSource", "MlflowReader", "SearchReader", "SqliteReader", "StoredRun", "StoredRunData",
           "StoredRunInfo", "Unreadable", "no_run", "open_reader", "sqlite_file"]


if TYPE_CHECKING:
    def _both_conform(mlflow_run: Run, stored: StoredRun) -> tuple[RunLike, RunLike]:
        # mypy checks here that MLflow's Run and the export's StoredRun are both what TrialRun reads.
        return mlflow_run, stored
