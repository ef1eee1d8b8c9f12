"""A working copy of an MLflow sqlite store brought back from another machine.

A store written on a GPU machine records absolute artifact locations of that machine
(``file:///<its checkout>/mlruns/artifacts/<search>``). Opened anywhere else, its runs have no readable
artifacts, so ``python -m autotune.export`` cannot read a trial's ``launch.json``. The copy made
here points each experiment (and its runs) at the folder of the same name under the store's
``mlruns/artifacts`` or ``artifacts``; the original is never written.

Usage (the command line is :mod:`autotune.cli.store_copy`)::

    autotune store-copy --store DIR_OR_DB --into DIR
    autotune export --name NAME --tracking-uri sqlite:///DIR/mlflow.db
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import sys
from pathlib import Path

from autotune.errors import ConfigError


def find_db(*, store: Path) -> Path:
    """The ``mlflow.db`` of ``store``: a folder holding it (or ``mlruns/mlflow.db``), or the file.

    Raises:
        ConfigError: No sqlite store there.
    """
    if store.is_dir():
        db = next((c for c in (store / "mlflow.db", store / "mlruns" / "mlflow.db") if c.is_file()),
                  store / "mlflow.db")
    else:
        db = store
    if not db.is_file():
        raise ConfigError(f"no MLflow sqlite store at {db}: the store must be a folder holding mlflow.db "
                          "(or mlruns/mlflow.db), or the mlflow.db file itself")
    return db


def artifact_trees(db: Path) -> list[Path]:
    """Where a brought-back store keeps its artifacts, next to its ``mlflow.db``."""
    roots = (db.parent / "artifacts", db.parent / "mlruns" / "artifacts")
    return [p for p in roots if p.is_dir()]


def relocated_copy(*, db: Path, into: Path) -> Path:
    """Copy ``db`` into the folder ``into``, artifact locations pointed at the local trees.

    An experiment whose location ends in ``<name>`` is pointed at ``<tree>/<name>`` when that folder
    exists; its runs' artifact URIs follow. Other experiments are left as they are.

    Returns:
        The copy's path (``into/mlflow.db``).
    """
    into.mkdir(parents=True, exist_ok=True)
    copy = into / "mlflow.db"
    if copy.resolve() == db.resolve():
        raise ConfigError(f"--into {into} holds the store itself; name another folder (the original is never written)")
    for suffix in ("", "-wal", "-journal"):
        if (src := db.with_name(db.name + suffix)).exists():
            shutil.copyfile(src, copy.with_name(copy.name + suffix))
    trees = artifact_trees(db)
    with contextlib.closing(sqlite3.connect(copy)) as con, con:
        rows = con.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall()
        for exp_id, location in rows:
            name = Path(re.sub(r"^file://", "", location or "")).name
            local = next((t / name for t in trees if name and (t / name).is_dir()), None)
            if not location or local is None:
                continue
            new = local.resolve().as_uri()
            con.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", (new, exp_id))
            con.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE experiment_id = ? "
                        "AND substr(artifact_uri, 1, ?) = ?",
                        (new, len(location) + 1, exp_id, len(location), location))
    return copy


if __name__ == "__main__":
    import functools

    from autotune import command_line as cli
    from autotune.cli.store_copy import main

    sys.exit(cli.run_main(functools.partial(main, prog="python -m autotune.tracking.store_copy")))
