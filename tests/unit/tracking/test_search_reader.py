"""The two readers of a search's recorded runs (sqlite read directly, MLflow's client) on one real store."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.tracking.search_reader import MlflowReader, SqliteReader, Unreadable, open_reader
from autotune.tracking.store import StoreUnreachable
from autotune.tracking.tracker import Tracker
from tests.tracking_helpers import eagle, failed, result

# ``store``: tests/conftest.py's sqlite store, one per module.


@pytest.fixture(scope="module")
def recorded(store: Path) -> Tracker:
    """Two search runs of one name; the second has every kind of run, a finished summary and a deleted run."""
    tr = Tracker("recorded", root=store).connect()
    tr.start_search(backend="sim", objective=("output_tok_s", "maximize"))
    tr.log_trial("old", result(eagle(3, 1), 1500.0))
    tr.finish_search()
    tr.start_search(backend="sim", objective=("output_tok_s", "maximize"))
    tr.log_trial("base", result({}, 1000.0), kind="baseline")
    tr.log_trial("t_best", result(eagle(5, 1, NCCL_ALGO="Ring"), 1650.0))
    tr.log_trial("t_slow", result(eagle(7, 4), 950.0, status="infeasible"))
    tr.log_trial("t_oom", failed(eagle(8, 8, 64)))
    tr.log_trial("finalist-t_best", result(eagle(5, 1, NCCL_ALGO="Ring"), 1640.0), kind="finalist", confirmed=True)
    gone = tr.log_trial("t_gone", result(eagle(2, 1), 2000.0))
    tr.client.delete_run(gone)  # deleted in the UI: neither reader may see it among the trials
    tr.finish_search()
    return tr


def _both(store: Path, name: str) -> tuple[SqliteReader, MlflowReader]:
    fast, slow = open_reader(name, root=str(store)), open_reader(name, root=str(store), fast=False)
    assert isinstance(fast, SqliteReader) and isinstance(slow, MlflowReader)
    return fast, slow


def test_both_readers_read_the_same_runs(recorded: Tracker, store: Path) -> None:
    fast, slow = _both(store, "recorded")
    assert fast.experiment_id == slow.experiment_id == recorded.experiment_id
    parent = fast.latest_search_run_id()
    assert parent == slow.latest_search_run_id() == recorded.parent_run_id
    runs = fast.trial_runs(parent)
    assert runs == slow.trial_runs(parent)
    assert [r.trial_id for r in runs] == ["base", "t_best", "t_slow", "t_oom", "finalist-t_best"]  # not t_gone
    assert runs[1].metrics["output_tok_s"] == 1650.0 and runs[1].params["NCCL_ALGO"] == "Ring"
    assert runs[3].status == "failed" and runs[3].output_tok_s is None  # unknown stays absent, never 0
    for run_id in (parent, *(r.run_id for r in runs)):
        assert fast.get_run(run_id) == slow.get_run(run_id)
    assert fast.get_run(parent).data.tags["autotune.winner_trial_id"] == "finalist-t_best"
    assert fast.load_spec(runs[1].run_id) == slow.load_spec(runs[1].run_id)


def test_missing_runs_experiments_and_launches_are_refused_in_the_same_words(recorded: Tracker,
                                                                              store: Path) -> None:
    fast, slow = _both(store, "recorded")
    messages = []
    for reader in (fast, slow):
        with pytest.raises(ConfigError) as no_run:
            reader.get_run("0" * 32)
        with pytest.raises(ConfigError) as no_launch:  # a search run has no launch.json
            reader.load_spec(recorded.parent_run_id or "")
        messages.append((str(no_run.value), str(no_launch.value)))
    assert messages[0] == messages[1]
    assert f"no run {'0' * 32} in " in messages[0][0] and "no readable launch.json" in messages[0][1]

    dropped = Tracker("dropped", root=store).connect()
    dropped.client.delete_experiment(dropped.experiment_id)
    for name, words in (("nope", "no experiment named 'nope'"), ("dropped", "was deleted")):
        errors = []
        for fast_read in (True, False):
            with pytest.raises(ConfigError) as err:
                open_reader(name, root=str(store), fast=fast_read)
            errors.append(str(err.value))
        assert errors[0] == errors[1] and words in errors[0]


@pytest.mark.slow  # a real MLflow store recorded once: 5 s (make test-fast leaves it out)
def test_where_each_reader_is_used(recorded: Tracker, store: Path, tmp_path: Path) -> None:
    db = store / "mlruns" / "mlflow.db"
    assert isinstance(open_reader("recorded", tracking_uri=f"sqlite:///{db}"), SqliteReader)
    with pytest.raises(ConfigError, match="no MLflow store"):
        open_reader("recorded", root=str(tmp_path))
    with socket.socket() as sock:  # a port nothing listens on: the server path goes through MLflow
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(StoreUnreachable):
        open_reader("recorded", tracking_uri=f"http://127.0.0.1:{port}")


def _other_database(tmp_path: Path) -> Path:
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as con:
        con.execute("CREATE TABLE notes (text TEXT)")  # a database, not an MLflow store
        con.commit()
    return other


def test_the_sqlite_reader_refuses_a_database_of_another_schema(tmp_path: Path) -> None:
    other = _other_database(tmp_path)
    with pytest.raises(Unreadable):
        SqliteReader("x", other, tracking_uri=f"sqlite:///{other}")
    with contextlib.closing(sqlite3.connect(other)) as con:  # an older MLflow's runs: no artifact_uri
        con.execute("CREATE TABLE experiments (experiment_id INTEGER, name TEXT, lifecycle_stage TEXT)")
        for table in ("latest_metrics (run_uuid, key, value, is_nan)", "params (run_uuid, key, value)",
                      "tags (run_uuid, key, value)", "runs (run_uuid, experiment_id, status, start_time, "
                      "lifecycle_stage)"):
            con.execute(f"CREATE TABLE {table}")
        con.commit()
    with pytest.raises(Unreadable, match="artifact_uri"):
        SqliteReader("x", other, tracking_uri=f"sqlite:///{other}")


@pytest.mark.slow  # MLflow makes its tables in the database: 15-40 s here
def test_a_database_the_sqlite_reader_refuses_is_read_through_mlflow(tmp_path: Path) -> None:
    other = _other_database(tmp_path)
    # MLflow's reader opens it instead (MLflow makes its tables there) and says it has no experiment 'x'.
    with pytest.raises(ConfigError, match="no experiment named 'x'"):
        open_reader("x", tracking_uri=f"sqlite:///{other}")
