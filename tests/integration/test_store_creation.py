"""Several processes making one fresh sqlite MLflow store at once (two searches started together in
a new folder): the store is made once, under tracking.store.creation_lock, and every process gets the
same experiment; none dies in MLflow's migrations."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

#: Processes racing for one fresh store; before the lock two were enough to fail now and then.
RACERS = 4


def _connect(root: str, barrier: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue) -> None:
    from autotune.tracking.store import make_client  # noqa: F401 - MLflow imported before the start line
    from autotune.tracking.tracker import Tracker

    barrier.wait(timeout=300)
    try:
        out.put(("ok", Tracker("same", root=root).connect().experiment_id))
    except Exception as exc:  # noqa: BLE001 - reported to the test, which shows it
        out.put(("error", f"{type(exc).__name__}: {exc}"))


@pytest.mark.slow  # four processes importing MLflow and migrating a store: 20-40 s on two loaded cores
@pytest.mark.timeout(600)
def test_processes_that_make_one_fresh_store_together_all_get_its_experiment(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(RACERS)
    out = ctx.Queue()
    procs = [ctx.Process(target=_connect, args=(str(tmp_path), barrier, out)) for _ in range(RACERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=500) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [why for kind, why in results if kind == "error"]
    assert not errors, errors
    assert len({eid for _, eid in results}) == 1, results


@pytest.mark.slow  # a fresh interpreter importing MLflow and migrating a store: 9 s here
def test_a_new_store_is_made_without_mlflow_s_migration_lines(tmp_path: Path) -> None:
    # A fresh interpreter: MLflow sets up its console handler when it is first imported.
    code = ("from autotune.tracking.tracker import Tracker\n"
            f"print(Tracker('quiet', root={str(tmp_path)!r}).connect().experiment_id)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "mlruns" / "mlflow.db").is_file()
    assert "Creating initial MLflow database tables" not in proc.stderr, proc.stderr
    assert "INFO mlflow" not in proc.stderr, proc.stderr
