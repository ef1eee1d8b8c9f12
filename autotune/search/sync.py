"""``autotune sync``: write to MLflow what a search spooled but MLflow did not take while it ran.

A search spools every MLflow write under its run folder (:mod:`autotune.tracking.spool`) and
replays them as it goes; records that a failed store (a tracking server down, a full disk) left
pending are replayed here, in order and idempotently (:mod:`autotune.tracking.durable`). A
resumed search (``--resume``) replays them too. What each run folder gave goes to stderr as it is
written; the result (what still waits) to stdout. Exit codes: 0 when MLflow holds everything, 1 when
records are still pending (the store still fails) or a spool line could not be read (named with
its file and line number; the records around it are written), 2 for bad input. The command line is
:mod:`autotune.cli.sync`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from autotune.errors import ConfigError
from autotune.names import check_path_name
from autotune.tracking.spool import HEADER, BadLine, Spool

if TYPE_CHECKING:
    from autotune.tracking.tracker import Tracker


@dataclass(frozen=True)
class SyncOutcome:
    """What a sync left undone.

    Attributes:
        pending: Records MLflow still lacks (its store failed, or a live search holds them).
        unreadable: Spool lines that are not records (each said on ``out`` with file and line):
            what they held cannot be written, so MLflow is never said to hold everything.
    """

    pending: int
    unreadable: list[BadLine] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.pending == 0 and not self.unreadable


def sync_search(name: str, *, root: str, tracking_uri: str | None = None,
                out: TextIO | None = None) -> SyncOutcome:
    """Replay the pending records of every run folder of search ``name``.

    Args:
        name: The search name.
        root: The project directory the search ran from (its ``mlruns/`` is there).
        tracking_uri: The store to write to; by default the one the search used.
        out: Where to print what was done (stdout by default).

    Returns:
        The records still pending, and the spool lines that could not be read.

    Raises:
        ConfigError: No search of that name under ``root``; a spool whose records name no
            search run and no store to find it in (a ``search.json`` the disk refused is rebuilt
            from the first record, which names the store; ``tracking_uri`` names it for a spool
            from before that); or a tracking URI that is malformed or that MLflow has no store
            for. A store that fails (a server down, a full disk) is no error: its records wait,
            counted in the return.
    """
    from autotune.export.launch_command import winner_files
    from autotune.tracking.durable import DurableTracker
    from autotune.tracking.store import check_uri, default_store
    from autotune.tracking.tracker import Tracker

    out = sys.stdout if out is None else out
    base = Path(root).resolve()
    storage = base / "mlruns" / "ray" / check_path_name(name, field="--name")
    runs = sorted(p for p in storage.glob("run-*") if p.is_dir())
    if not runs:
        raise ConfigError(f"no search named {name!r} under {storage}; check --name and --root", field="name")
    left, synced_any = 0, False
    unreadable: list[BadLine] = []
    for run in runs:
        spool = Spool(run / "tracking")
        for bad in spool.bad_lines:
            print(f"{run.name}: cannot read {bad} (the records around it are written)", file=out, flush=True)
        unreadable.extend(spool.bad_lines)
        pending = len(spool.pending())
        if not pending:
            continue
        header = spool.header()
        recovered = header is None
        if header is None:  # the disk refused search.json when the search began: its first record has it
            header = _header_from_records(spool, tracking_uri)
        # A search that never reached MLflow names no run yet: its first record makes it.
        starts = spool.pending()[0].op == "start"
        if not (header.get("parent_run_id") or starts or recovered):
            raise ConfigError(f"{spool.folder / HEADER} holds no MLflow search run id and its search run's "
                              f"start is not pending, so {pending} record(s) of {spool.path} have no run to "
                              "go to; nothing was written", field="name")
        if not spool.lock():
            print(f"{run.name}: its search is still running and writes its own {pending} record(s)", file=out)
            left += pending
            synced_any = True
            continue
        uri = tracking_uri or header["tracking_uri"]
        local = uri == default_store(base)[0]
        tracker = Tracker(name, root=str(base), tracking_uri=None if local else uri)
        check_uri(tracker.tracking_uri)
        tracker.client  # noqa: B018 - a URI MLflow has no store for is bad input (exit 2), not a wait
        try:
            tracker.connect()
        except ConfigError as exc:  # the store still fails (down, full): the records keep waiting
            print(f"{run.name}: {pending} record(s) still wait: {exc}", file=out, flush=True)
            left += pending
            synced_any = True
            continue
        tracker.parent_run_id = header.get("parent_run_id")
        if recovered and spool.records()[0].seq not in {r.seq for r in spool.pending()}:
            # The search run was made (its start is synced) but no file names it: find it by the
            # id its start record tagged it with, then keep the rebuilt header for later syncs.
            tracker.parent_run_id = _search_run_of(tracker, spool)
            try:
                spool.write_header({**header, "experiment_id": tracker.experiment_id,
                                    "parent_run_id": tracker.parent_run_id})
                kept = "rebuilt"
            except OSError as exc:  # the records still go; the next sync rebuilds it again
                kept = f"found, but not written ({exc.strerror or exc})"
            print(f"{run.name}: {spool.folder / HEADER} was missing; the search run {tracker.parent_run_id} "
                  f"{kept} from {spool.path}", file=out, flush=True)
        durable = DurableTracker(tracker, spool.folder, say=lambda line: print(line, file=out, flush=True),
                                 winner_files=winner_files, spool=spool)
        still = durable.drain(force=True)
        print(f"{run.name}: {pending - still} of {pending} record(s) written to {uri}"
              + (f"; {still} still pending (details: {spool.error_log})" if still else ""), file=out, flush=True)
        left += still
        synced_any = True
    if not synced_any and not unreadable:
        print(f"nothing to sync: MLflow holds every record of search {name!r}", file=out)
    return SyncOutcome(left, unreadable)


def _header_from_records(spool: Spool, tracking_uri: str | None) -> dict[str, Any]:
    """``search.json`` rebuilt from the spool's first record (a ``start``, which names the store).

    Raises:
        ConfigError: The first record is no ``start``, or it does not name the store (a spool
            written before the store was recorded there) and ``tracking_uri`` is None.
    """
    records = spool.records()
    start = records[0] if records and records[0].op == "start" else None
    store = dict(start.data.get("store") or {}) if start is not None else {}
    uri = tracking_uri or store.get("tracking_uri")
    if start is None:
        raise ConfigError(f"{spool.folder / HEADER} is missing and the first record of {spool.path} is not "
                          "the search run's start, so nothing says which MLflow search run its records "
                          "belong to; they are kept there, unsynced", field="name")
    if not uri:
        raise ConfigError(f"{spool.folder / HEADER} is missing and {spool.path} does not name the MLflow "
                          "store its search used; run autotune sync again with --tracking-uri URI (that "
                          "store's URI)", field="tracking_uri")
    return {"name": store.get("name"), "tracking_uri": uri, "root": store.get("root"),
            "experiment_id": None, "parent_run_id": store.get("resumes")}


def _search_run_of(tracker: Tracker, spool: Spool) -> str:
    """The search run a spool's synced ``start`` record made (or resumed), found in MLflow.

    Raises:
        ConfigError: MLflow holds no such run (it was deleted, or this is another store).
    """
    from autotune.tracking.durable import TAG_SPOOL_ID

    start = spool.records()[0]
    if tracker.parent_run_id:  # a resumed search: its record names the run it went on with
        return tracker.parent_run_id
    found = tracker.search_run_tagged(TAG_SPOOL_ID, str(start.data.get("spool_id")))
    if not found:
        raise ConfigError(f"{spool.folder / HEADER} is missing and {tracker.tracking_uri} holds no search run "
                          f"tagged {TAG_SPOOL_ID}={start.data.get('spool_id')} (the one {spool.path} made); "
                          "check --tracking-uri: it must be the store the search wrote to", field="tracking_uri")
    return found


if __name__ == "__main__":
    import functools

    from autotune import command_line as cli
    from autotune.cli.sync import main

    sys.exit(cli.run_main(functools.partial(main, prog="python -m autotune.search.sync")))
