"""The MLflow store under a :class:`~autotune.tracking.tracker.Tracker`: where it is, and plain calls.

Here are the local store's location, the client (MLflow imported on first use), the tracking
server's health probe, opening the experiment, reading a trial's stored launch, and the calls
every part of the tracker makes: retried while sqlite is locked by another process, chunked to
``log_batch``'s maxima, paged through ``search_runs``. Nothing here holds state: each function
takes the client or URI it works on, so the tracker stays a picklable bag of strings and the
trial and summary logging share one way of writing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from autotune.errors import ConfigError
from autotune.figures import finite, shown
from autotune.launch.spec import LaunchSpec
from autotune.names import safe_path_name
from autotune.tracking import ui_links
from autotune.tracking.content import MAX_PARAM
from autotune.tracking.runs import TAG_SEARCH_NAME

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from autotune.tracking.runs import RunLike

T = TypeVar("T")

# MLflow's limits (mlflow.utils.validation) and log_batch's per-call maxima.
MAX_TAG = 8000
_BATCH_METRICS, _BATCH_PARAMS, _BATCH_TAGS = 1000, 100, 100


def default_store(root: str | os.PathLike[str] | None = None) -> tuple[str, str]:
    """The local store of a project directory: ``(tracking_uri, artifact_root)``.

    Args:
        root: The project directory; the current working directory if None.
    """
    base = Path(root if root is not None else os.getcwd()).resolve() / "mlruns"
    return f"sqlite:///{base}/mlflow.db", f"file://{base}/artifacts"


def _is_locked(exc: BaseException) -> bool:
    return "database is locked" in str(exc)


def retry(fn: Callable[[], T], *, attempts: int = 8) -> T:
    """Run a store call, retrying while sqlite is locked by another process."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:  # MlflowException wraps sqlalchemy's OperationalError; re-raised
            if not _is_locked(exc) or i == attempts - 1:
                raise
            time.sleep(0.05 * 2 ** i)
    raise AssertionError("unreachable")


def make_client(tracking_uri: str) -> MlflowClient:
    """An MLflow client of ``tracking_uri`` (imports MLflow).

    Raises:
        ConfigError: MLflow has no store for the URI (an unknown scheme, a missing driver).
    """
    if tracking_uri.startswith(("http://", "https://")):
        # MLflow's defaults retry for minutes; a search should fail fast and say why.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    # A progress bar on stderr for every artifact read is noise in a CLI's output.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow import MlflowClient

    try:
        return MlflowClient(tracking_uri=tracking_uri)
    except Exception as exc:  # noqa: BLE001 - MLflow's errors for a scheme it has no store for
        # An unknown scheme (foo://), a database without its driver, a bare path: the input's
        # fault, said in one line, never a traceback.
        if "Unsupported" in type(exc).__name__:  # MLflow's own words are about its model registry
            scheme = tracking_uri.split(":", 1)[0]
            raise ConfigError(f"MLflow cannot use the tracking URI {tracking_uri!r}: it has no store for "
                              f"{scheme}:// URIs; give a tracking server (http://HOST:PORT), a database "
                              "(sqlite:///PATH) or leave --tracking-uri out for the local store under mlruns/",
                              field="tracking_uri") from None
        raise ConfigError(f"MLflow cannot use the tracking URI {tracking_uri!r}: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:300]}", field="tracking_uri") from None


class StoreUnreachable(ConfigError):
    """A tracking server that does not answer at all (refused, timed out, name not resolved).

    Unlike other store errors this is no fault of the input: a search spools its writes and goes
    on (:mod:`autotune.tracking.durable`); a read-only command (export) still stops on it.

    Args:
        message: What is wrong and what to do about it.
        reason: The cause in a few words (``ConnectError: ... Connection refused``), for a
            console line that has its own advice.
        field: The offending field.
    """

    def __init__(self, message: str, *, reason: str = "", field: str | None = None) -> None:
        self.reason = reason
        super().__init__(message, field=field)


def check_uri(tracking_uri: str) -> None:
    """Refuse a tracking URI that no store could ever answer: a malformed server address.

    Raises:
        ConfigError: An ``http(s)`` URI without a host or with a port that is not a number.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(tracking_uri)
    if parts.scheme.lower() not in ("http", "https"):
        return  # other schemes are MLflow's to judge when the client is made (make_client)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:  # "http://host:abc" or a port beyond 65535
        port_ok = False
    if not parts.hostname or not port_ok:
        raise ConfigError(f"malformed tracking URI {tracking_uri!r}: a tracking server's address is "
                          "http://HOST:PORT (or https://...)", field="tracking_uri")


def probe_server(tracking_uri: str) -> None:
    """Fail fast when a tracking server does not answer or is broken.

    Raises:
        StoreUnreachable: Nothing answers (refused, timed out, the host not found).
        ConfigError: It answers with a server error, or the address is malformed.
    """
    import httpx

    check_uri(tracking_uri)
    url = tracking_uri.rstrip("/") + "/health"
    try:
        resp = httpx.get(url, timeout=5.0)
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise ConfigError(f"malformed tracking URI {tracking_uri!r} ({exc})", field="tracking_uri") from None
    except httpx.HTTPError as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise StoreUnreachable(
            f"the MLflow tracking server {tracking_uri} does not answer ({reason}); start it "
            "(mlflow server --host ... --port ...) or leave --tracking-uri out to track in the local "
            "store under mlruns/", reason=reason, field="tracking_uri") from None
    if resp.status_code >= 500:
        raise ConfigError(f"the MLflow tracking server {tracking_uri} answers {url} with HTTP "
                          f"{resp.status_code}; check the server's log", field="tracking_uri")


@contextlib.contextmanager
def creation_lock(tracking_uri: str) -> Iterator[None]:
    """Held while a sqlite store is made and its experiment found or made, so that two searches
    started together in a fresh folder do not both run MLflow's migrations (alembic's "Online
    migration expected to match one row", "table ... already exists"): the second waits, then finds
    the store made. Other stores (a tracking server) make their own; nothing is held for them."""
    if not tracking_uri.startswith("sqlite:///"):
        yield
        return
    db = Path(tracking_uri.removeprefix("sqlite:///").split("?", 1)[0])  # sqlite:///rel, sqlite:////abs
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        fh = open(db.parent / f".{db.name}.lock", "a")  # noqa: SIM115 - closed below, after the flock ends
    except OSError:
        yield  # a folder that refuses the lock file refuses the store too: open_experiment says so
        return
    # MLflow announces a new store's migrations at INFO ("Creating initial MLflow database
    # tables...") before the search's own lines; its warnings and errors still reach the console.
    migrations = logging.getLogger("mlflow.store.db.utils")
    level = migrations.level
    try:
        fcntl.flock(fh, fcntl.LOCK_EX)
        migrations.setLevel(max(level, logging.WARNING))
        yield
    finally:
        migrations.setLevel(level)
        fh.close()  # closing ends the flock


def prepare_local(root: str, *, create: bool) -> None:
    """Make the directory of the local store under ``root`` (or, not ``create``, check it is there).

    Raises:
        ConfigError: ``create`` is False and there is no store, or the directory cannot be made.
    """
    db = Path(root) / "mlruns" / "mlflow.db"
    if not create and not db.exists():
        raise ConfigError(f"no MLflow store at {db}: run a search from {root} first, or "
                          "pass --tracking-uri / --root", field="tracking_uri")
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the MLflow store directory {db.parent}: {exc}",
                          field="tracking_uri") from None


def open_experiment(client: MlflowClient, name: str, *, tracking_uri: str, artifact_root: str | None,
                    create: bool) -> str:
    """The id of the experiment ``name``, created first if missing and ``create``.

    Raises:
        ConfigError: The store cannot be opened, the experiment was deleted, or (``create=False``)
            it does not exist.
    """
    try:
        experiment = retry(lambda: client.get_experiment_by_name(name))
        if experiment is None and create:
            experiment = create_experiment(client, name, artifact_root)
        elif (create and experiment is not None and experiment.lifecycle_stage == "active"
              and ui_links.view_outdated(experiment.tags.get(ui_links.VIEW_TAG))):
            # Made by an earlier autotune (no view, or an older one): the links printed at the end open this view.
            for key, value in ui_links.view_tags(created_ms=int(time.time() * 1000)).items():
                retry(partial(client.set_experiment_tag, experiment.experiment_id, key, value))
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - MlflowException, sqlalchemy and requests errors
        if _unreachable(exc):  # the server went away between the probe and this call
            raise StoreUnreachable(f"the MLflow tracking server {tracking_uri} does not answer: "
                                   f"{type(exc).__name__}", reason=type(exc).__name__, field="tracking_uri") from None
        raise ConfigError(f"cannot open the MLflow store {tracking_uri}: "
                          f"{type(exc).__name__}: {exc}", field="tracking_uri") from None
    return checked_experiment(None if experiment is None else (experiment.experiment_id, experiment.lifecycle_stage),
                              name, tracking_uri=tracking_uri)


def checked_experiment(found: tuple[str, str] | None, name: str, *, tracking_uri: str) -> str:
    """The id of the experiment ``name`` as a store found it (``(id, lifecycle stage)``, None when it
    has none), refused when missing or deleted; MLflow's reader and the sqlite one
    (:mod:`autotune.tracking.search_reader`) both say it so.

    Raises:
        ConfigError: No such experiment, or it was deleted.
    """
    if found is None:
        raise ConfigError(f"no experiment named {name!r} in {tracking_uri}; "
                          "check --name (it is the search name)", field="name")
    experiment_id, stage = found
    if stage == "deleted":
        raise ConfigError(f"the experiment {name!r} was deleted in {tracking_uri}; restore "
                          f"it (mlflow experiments restore --experiment-id {experiment_id}) "
                          "or use another search name", field="name")
    return experiment_id


def _unreachable(exc: BaseException) -> bool:
    """Whether a store call failed because nothing answered: a connection error (refused, reset,
    or a connect timeout) anywhere in the exception's chain. MLflow re-raises requests' errors as
    an MlflowException inside its ``except`` block, so the original is the context; a server that
    answered, even with an error, is not unreachable."""
    import requests

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (ConnectionError, requests.exceptions.ConnectionError)):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def create_experiment(client: MlflowClient, name: str, artifact_root: str | None) -> Any:
    """Create the experiment of a search (or find the one another process just made)."""
    from mlflow.exceptions import MlflowException

    location = f"{artifact_root.rstrip('/')}/{safe_path_name(name)}" if artifact_root else None
    try:
        retry(lambda: client.create_experiment(name, artifact_location=location,
                                               tags=_experiment_tags(name)))
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":  # another process made it first
            raise
    return retry(lambda: client.get_experiment_by_name(name))


def _experiment_tags(name: str) -> dict[str, str]:
    # The kind is what MLflow 3.x before workflow-based navigation reads (3.17 reads the URL:
    # autotune.tracking.ui_links); the saved view is what the printed runs link opens.
    return {TAG_SEARCH_NAME: name, "mlflow.experimentKind": "custom_model_development",
            "mlflow.note.content": f"autotune search **{name}**: one parent run per search, one nested "
                                   "run per trial, baseline and finalist.",
            **ui_links.view_tags(created_ms=int(time.time() * 1000))}


def search_runs(client: MlflowClient, experiment_id: str, filter_string: str, *,
                order_by: list[str] | None = None, limit: int | None = None) -> list[Any]:
    """The runs of an experiment that match a filter, every page of them (at most ``limit``)."""
    runs: list[Any] = []
    token = None
    while True:
        page = retry(partial(
            client.search_runs, [experiment_id], filter_string=filter_string,
            max_results=min(limit or 1000, 1000), order_by=order_by, page_token=token))
        runs.extend(page)
        token = page.token
        if not token or (limit is not None and len(runs) >= limit):
            return runs[:limit] if limit else runs


def log_batch(client: MlflowClient, run_id: str, *, metrics: Sequence[Any] = (),
              params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None) -> None:
    """Log metrics, params and tags on a run, in chunks ``log_batch`` accepts; tags cut to length."""
    from mlflow.entities import Param, RunTag

    param_list = [Param(k, v) for k, v in (params or {}).items()]
    tag_list = [RunTag(k, str(v)[:MAX_TAG]) for k, v in (tags or {}).items()]
    metrics = list(metrics)
    while metrics or param_list or tag_list:
        chunk_m, metrics = metrics[:_BATCH_METRICS], metrics[_BATCH_METRICS:]
        chunk_p, param_list = param_list[:_BATCH_PARAMS], param_list[_BATCH_PARAMS:]
        chunk_t, tag_list = tag_list[:_BATCH_TAGS], tag_list[_BATCH_TAGS:]
        retry(partial(client.log_batch, run_id, metrics=chunk_m, params=chunk_p, tags=chunk_t))


def new_params(run: RunLike, params: Mapping[str, Any]) -> dict[str, str]:
    """Params the run does not have yet (MLflow params cannot change once logged)."""
    have = run.data.params
    return {k: str(v)[:MAX_PARAM] for k, v in params.items() if v is not None and k not in have}


def log_facts(client: MlflowClient, run_id: str, *, params: Mapping[str, Any] | None = None,
              metrics: Mapping[str, float | None] | None = None, tags: Mapping[str, str] | None = None,
              files: Mapping[str, str | os.PathLike[str]] | None = None,
              texts: Mapping[str, str] | None = None, artifact_dir: str | None = None) -> None:
    """Log facts on a run: see :meth:`autotune.tracking.tracker.Tracker.log_to_search`."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metric_list = [Metric(k, shown(x), now, 0) for k, v in (metrics or {}).items()
                   if (x := finite(v)) is not None]
    fresh = new_params(retry(lambda: client.get_run(run_id)),
                       {k: v for k, v in (params or {}).items() if v is not None})
    log_batch(client, run_id, metrics=metric_list, params=fresh, tags=dict(tags or {}))
    if files or texts:
        with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
            for name, path in (files or {}).items():
                Path(tmp, name).write_bytes(Path(path).read_bytes())
            for name, text in (texts or {}).items():
                Path(tmp, name).write_text(text)
            retry(lambda: client.log_artifacts(run_id, tmp, artifact_dir))


def load_spec(client: MlflowClient, run_id: str) -> LaunchSpec:
    """The launch a trial run stored (see :meth:`~autotune.tracking.tracker.Tracker.load_spec`)."""
    with tempfile.TemporaryDirectory(prefix="autotune-mlflow-") as tmp:
        try:
            path = retry(lambda: client.download_artifacts(run_id, "launch.json", tmp))
            data = json.loads(Path(path).read_text())
        except Exception as exc:  # noqa: BLE001 - missing artifact (MlflowException, OSError) or bad JSON
            raise ConfigError(f"run {run_id} has no readable launch.json artifact ({type(exc).__name__}: "
                              f"{exc})", field="run_id") from None
    return LaunchSpec.from_json(data)
