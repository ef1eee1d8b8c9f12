"""Several processes making one fresh sqlite MLflow store at once (two searches started together in
a new folder): the store is made once, under tracking.store.creation_lock, and every process gets the
same experiment; none dies in MLflow's migrations."""

from __future__ import annotations

import multiprocessing
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
