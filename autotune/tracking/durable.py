"""A search's MLflow writes made durable: spooled first, replayed in order, and never raising.

:class:`DurableTracker` stands in front of a :class:`~autotune.tracking.tracker.Tracker` for
everything a search writes (its search run's start, trial results, lost attempts, facts on the
search run, its end). Each write becomes a :class:`~autotune.tracking.spool.Record` in the search's
spool, and the pending records are then replayed to MLflow in order. A store that fails (a
tracking server gone, a full disk) costs nothing but delay: the records wait in the spool and are
replayed with the next write after a pause, at the search's end, by a resumed search, or by
``autotune sync``. Ray must never see an exception from tracking (Ray would stop the trial and
run it again), so no write here raises; one console line says what happened, and the traceback
goes to the spool's ``tracking-errors.log``.

A tracking server that does not answer when the search starts is the same fault, earlier: the
``start`` record waits first in the spool, and everything after it waits behind it; its replay
makes the experiment (or reuses the one of that name) and the search run, then the rest follows.

Replays are idempotent: a search run is found by its ``autotune.spool_id`` tag (the placeholder
id its ``start`` record carries), a trial's run by its ``autotune.trial_id`` tag, a record carries
its attempt number and its time, MLflow drops a metric it already holds with the same step, time
and value, and tags, params and artifacts are written with the same values again.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import cut, is_disk_full
from autotune.tracking.interface import WinnerFiles
from autotune.tracking.spool import Record, Spool

if TYPE_CHECKING:
    from optuna import Study

    from autotune.tracking.tracker import Tracker
    from autotune.trial.result import TrialResult

#: Loggers that report store faults the durable tracker handles (see ``_route_store_logs``).
_STORE_LOGGERS = ("mlflow.store.db.utils", "urllib3.connectionpool", "mlflow.utils.rest_utils")

_ROUTED: dict[str, Any] = {}  # logger name -> the handler this process routed it to

#: The tag naming the spool record that made a search run (the placeholder id replays map).
TAG_SPOOL_ID = "autotune.spool_id"

#: Seconds between replays after MLflow failed (a write in between is only spooled).
RETRY_AFTER_S = 5.0


def sync_command(name: str, root: str, tracking_uri: str | None) -> str:
    """The command that replays a search's pending records (what the summary tells people)."""
    uri = f" --tracking-uri {tracking_uri}" if tracking_uri and not tracking_uri.startswith("sqlite:") else ""
    return f"autotune sync --name {name} --root {root}{uri}"


def _brief(exc: BaseException) -> str:
    """An exception in a few words for a console line: "disk full" if it is (a cut message hid it)."""
    text = "disk full" if is_disk_full(exc) else cut(" ".join(str(exc).split()), limit=140)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class DurableTracker:
    """A :class:`~autotune.tracking.tracker.Tracker` whose writes go through a spool.

    It implements :class:`~autotune.tracking.interface.SearchTracker`: each write there is
    spooled, and the ids it reads (``tracking_uri``, ``experiment_id``, ``parent_run_id``) are the
    tracker's. Nothing else passes through: a write that is not spooled is not made.

    Args:
        tracker: The search's tracker, connected or not (a server that did not answer) for
            :meth:`open_search`.
        folder: The spool's folder (``<run dir>/tracking``).
        say: Prints one console line (the default: stderr).
        retry_after_s: Seconds to wait after MLflow failed before replaying again.
        winner_files: Passed to :meth:`Tracker.finish_search` when a ``finish`` record is replayed.
        study: The search's Optuna study for the ``finish`` record; None rebuilds it from the runs.
        spool: The spool of ``folder`` when the caller has it open already (and locked).
    """

    def __init__(self, tracker: Tracker, folder: str | os.PathLike[str], *, say: Callable[[str], None] | None = None,
                 retry_after_s: float = RETRY_AFTER_S, winner_files: WinnerFiles | None = None,
                 study: Study | None = None, spool: Spool | None = None) -> None:
        self.tracker = tracker
        self.spool = spool or Spool(folder)
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        for bad in self.spool.bad_lines if spool is None else []:  # autotune sync says its own
            self.say(f"tracking: cannot read {bad}; the records around it are replayed")
        self.retry_after_s = retry_after_s
        self.winner_files = winner_files
        self.study = study
        self._failing_since: float | None = None
        self._last_try = 0.0
        self._disk_said = False

    # -- what a search reads back: the tracker's ids -------------------------------------------

    @property
    def tracking_uri(self) -> str:
        """The MLflow store's URI."""
        return self.tracker.tracking_uri

    @property
    def experiment_id(self) -> str | None:
        """The search's experiment, None until MLflow answered."""
        return self.tracker.experiment_id

    @property
    def parent_run_id(self) -> str | None:
        """The search run, None while its ``start`` record waits in the spool."""
        return self.tracker.parent_run_id

    def open_search(self, *, start: Mapping[str, Any], space_file: str | None = None,
                    workload: Mapping[str, Any] | None = None) -> int:
        """Open the search run as a spooled ``start`` record, then replay; never raises.

        The start is a record like any other, so the same rules hold for it: with MLflow
        answering, the search run is made at once; with MLflow unreachable from the first second,
        the search goes on and the run is made, before everything spooled after it, when MLflow
        answers (a later write, a resumed search, or ``autotune sync``). Its record carries a
        placeholder id (tagged ``autotune.spool_id`` on the run), so a replay that finds the run
        made already maps the placeholder to it instead of making a second one.

        Args:
            start: :meth:`Tracker.start_search`'s keyword arguments but ``space_path`` (JSON-ready).
            space_file: The space file; its text is kept in the record (the file may change).
            workload: ``{"spec", "file", "name"}``: the workload logged as the run's dataset.

        Returns:
            The records still pending afterwards.
        """
        from autotune.command_line import versions

        header = self.spool.header() or {}
        same_store = header.get("tracking_uri") == self.tracker.tracking_uri
        if start.get("resume") and header.get("parent_run_id") and same_store:
            # Resume this folder's own search run, not whichever is the experiment's newest.
            self.tracker.parent_run_id = header["parent_run_id"]

        def data() -> dict[str, Any]:
            params = {**{f"version_{k}": v for k, v in versions().items()}, **dict(start.get("params") or {})}
            if space_file:
                params["space_path"] = str(Path(space_file).resolve())
            t = self.tracker
            # What search.json says, kept in the first record too: a header the disk refused must
            # not leave the records without their store (autotune sync rebuilds it from here).
            store = {"name": t.name, "tracking_uri": t.tracking_uri, "root": t.root,
                     "resumes": t.parent_run_id if start.get("resume") else None}
            return {"spool_id": f"spool-{uuid.uuid4().hex}", "start": {**start, "params": params},
                    "store": store, "space_file": space_file, "space_text": Path(space_file).read_text(
                        errors="replace") if space_file and Path(space_file).is_file() else None,
                    "workload": dict(workload or {})}

        self._route_store_logs()
        try:
            self.spool.lock()
        except OSError as exc:
            self._trouble(f"cannot lock the tracking spool in {self.spool.folder}", exc)
        self._save_header()
        self._write("start", data, force=True)
        return self.unsynced()

    # -- the writes a search makes ---------------------------------------------------------------

    def log_trial(self, trial_id: str, result: TrialResult, *, kind: str | None = None,
                  confirmed: bool | None = None, drain: bool = True) -> None:
        """Spool a trial's result (its next attempt) and, with ``drain``, replay; never raises."""
        self._write("trial", lambda: self._trial_data(trial_id, result, kind, confirmed), drain=drain)

    def log_lost_attempt(self, trial_id: str, reason: str, *, params: Mapping[str, Any] | None = None,
                         kind: str = "trial") -> None:
        """Spool that an attempt of a trial ended without a result (Ray runs it again); never raises."""
        self._write("lost", lambda: {"trial_id": trial_id, "attempt": self.spool.next_attempt(trial_id),
                                     "reason": reason, "params": dict(params or {}), "kind": kind})

    def log_to_search(self, *, params: Mapping[str, Any] | None = None,
                      metrics: Mapping[str, float | None] | None = None, tags: Mapping[str, str] | None = None,
                      files: Mapping[str, str | os.PathLike[str]] | None = None,
                      texts: Mapping[str, str] | None = None, artifact_dir: str | None = None) -> None:
        """Spool facts for the search run (files are read now, as texts); never raises."""
        def data() -> dict[str, Any]:
            all_texts = {**{k: Path(p).read_text(errors="replace") for k, p in (files or {}).items()},
                         **dict(texts or {})}
            return {"params": dict(params or {}), "metrics": dict(metrics or {}), "tags": dict(tags or {}),
                    "texts": all_texts, "artifact_dir": artifact_dir}
        self._write("facts", data)

    def fail_search(self, reason: str) -> None:
        """Spool the search run's end as FAILED; never raises."""
        self._write("fail", lambda: {"reason": reason})

    def finish_search(self, *, study: Study | None = None, status: str = "FINISHED",
                      sglang_default: Mapping[str, Any] | None = None,
                      winner_files: WinnerFiles | None = None,
                      report_files: Mapping[str, str] | None = None) -> None:
        """Spool the search's end (summary, plots, the winner's files) and replay; never raises."""
        self.study = study if study is not None else self.study
        self.winner_files = winner_files or self.winner_files
        self._write("finish", lambda: {"status": status, "sglang_default": dict(sglang_default or {}) or None,
                                       "report_files": dict(report_files or {})}, force=True)

    # -- replaying -----------------------------------------------------------------------------

    def unsynced(self) -> int:
        """How many records MLflow does not hold yet."""
        return len(self.spool.pending())

    def drain(self, *, force: bool = False) -> int:
        """Replay the pending records in order, up to the first that fails; never raises.

        Args:
            force: Replay now even within ``retry_after_s`` of a failure.

        Returns:
            The records still pending.
        """
        now = time.monotonic()
        if self._failing_since is not None and not force and now - self._last_try < self.retry_after_s:
            return self.unsynced()
        self._last_try = now
        written = 0
        record = None
        try:
            for record in self.spool.pending():
                self.apply(record)
                self.spool.mark_synced(record.seq)
                written += 1
        except Exception as exc:  # noqa: BLE001 - any store failure: the record waits in the spool
            left = self.unsynced()
            if self._failing_since is None:
                self._failing_since = now
                t = self.tracker
                if record is not None and record.op == "start":
                    # MLflow never answered this search: the one line a person needs to sync later.
                    command = sync_command(t.name, t.root, None if t.local else t.tracking_uri)
                    why = getattr(exc, "reason", "") or _brief(exc)
                    self._trouble(f"MLflow at {t.tracking_uri} is unreachable ({why}); the search goes on "
                                  f"and spools its results at {self.spool.path} (written if MLflow answers "
                                  f"while it runs); to sync them afterwards: {command}", exc)
                else:
                    self._trouble(f"MLflow at {t.tracking_uri} failed a write ({_brief(exc)}); "
                                  f"{left} record(s) kept in {self.spool.path}, written when it answers "
                                  "again; trials go on", exc)
            else:
                self._log(f"replay failed again, {left} pending", exc)
            return left
        if self._failing_since is not None:
            self._failing_since = None
            self.say(f"tracking: MLflow at {self.tracker.tracking_uri} answers again; "
                     f"{written} spooled record(s) written")
        return 0

    def apply(self, record: Record) -> None:
        """Write one record to MLflow (idempotent: see the module docstring)."""
        from autotune.trial.result import TrialResult

        t, d = self.tracker, record.data
        if record.op == "start":
            self._apply_start(record)
        elif record.op == "trial":
            t.log_trial(d["trial_id"], TrialResult.from_dict(d["result"]), kind=d.get("kind"),
                        confirmed=d.get("confirmed"), attempt=d["attempt"], at_ms=record.at_ms)
        elif record.op == "lost":
            t.log_lost_attempt(d["trial_id"], d["reason"], attempt=d["attempt"],
                               params=d.get("params") or {}, kind=d.get("kind") or "trial")
        elif record.op == "facts":
            t.log_to_search(params=d.get("params"), metrics=d.get("metrics"), tags=d.get("tags"),
                            texts=d.get("texts") or None, artifact_dir=d.get("artifact_dir"))
        elif record.op == "fail":
            t.fail_search(d["reason"])
        elif record.op == "finish":
            t.finish_search(study=self.study, status=d.get("status") or "FINISHED",
                            sglang_default=d.get("sglang_default"), winner_files=self.winner_files,
                            report_files=d.get("report_files") or None)
        else:
            raise ValueError(f"spool record {record.seq} has an unknown op {record.op!r}")

    # -- internals -----------------------------------------------------------------------------

    def _apply_start(self, record: Record) -> None:
        """Make (or find) the search run of a ``start`` record, then name it in the header."""
        import tempfile

        t, d = self.tracker, record.data
        if t.experiment_id is None:
            t.connect()  # the experiment of that name if it exists (as a search would), else made
        start = dict(d["start"])
        found = None if start.get("resume") else t.search_run_tagged(TAG_SPOOL_ID, d["spool_id"])
        if found:  # made by an earlier replay that was stopped before it marked the record
            t.use_search_run(found)
        else:
            with tempfile.TemporaryDirectory(prefix="autotune-space-") as tmp:
                space = None
                if d.get("space_text") is not None:
                    # The text as the search read it, logged under the file's own name.
                    space = Path(tmp, Path(d.get("space_file") or "space.yaml").name)
                    space.write_text(d["space_text"])
                extra: dict[str, Any] = {} if start.get("resume") else {"tags": {TAG_SPOOL_ID: d["spool_id"]},
                                                                        "started_ms": record.at_ms}
                t.start_search(space_path=space, **start, **extra)
        self._log_workload(d.get("workload") or {})
        self._save_header()

    def _log_workload(self, workload: Mapping[str, Any]) -> None:
        """Log the workload as the search run's dataset (once: the digest is checked first)."""
        if not workload.get("spec") and not workload.get("name"):
            return
        from autotune.space.workload import Workload
        from autotune.tracking.dataset import log_workload

        try:
            built = Workload.from_spec(workload.get("spec"), file=workload.get("file"))
        except Exception as exc:  # noqa: BLE001 - its prompt file gone since: the run goes without it
            self._log("the workload could not be rebuilt for the search run's dataset", exc)
            return
        parent = self.tracker.parent_run_id
        if parent is None:  # only after a start record was applied, which sets it
            raise ValueError("the search run's workload was logged before the search run was made")
        log_workload(self.tracker.client, parent, built, name=workload.get("name") or "workload")

    def _save_header(self) -> None:
        """Name the search run in ``search.json`` (its id is None while its start is spooled)."""
        t = self.tracker
        try:
            self.spool.write_header({"name": t.name, "tracking_uri": t.tracking_uri, "root": t.root,
                                     "experiment_id": t.experiment_id, "parent_run_id": t.parent_run_id})
        except OSError as exc:
            self._trouble(f"cannot write the tracking spool header in {self.spool.folder}", exc)

    def _trial_data(self, trial_id: str, result: TrialResult, kind: str | None,
                    confirmed: bool | None) -> dict[str, Any]:
        return {"trial_id": trial_id, "attempt": self.spool.next_attempt(trial_id), "kind": kind,
                "confirmed": confirmed, "result": result.to_dict(records=True)}  # the run's requests.jsonl

    def _write(self, op: str, data: Callable[[], dict[str, Any]], *, force: bool = False,
               drain: bool = True) -> None:
        try:
            payload = data()
            key = f"{op}:{payload['trial_id']}#{payload['attempt']}" if "trial_id" in payload else op
            self.spool.append(op, key, payload)
            if self.spool.write_error is not None and not self._disk_said:
                self._disk_said = True
                self._trouble(f"cannot write the tracking spool {self.spool.path} "
                              f"({_brief(self.spool.write_error)}); "
                              f"{len(self.spool.pending())} record(s) held in memory until it can",
                              self.spool.write_error)
            elif self.spool.write_error is None:
                self._disk_said = False
        except Exception as exc:  # noqa: BLE001 - a write that cannot even be recorded must not stop a trial
            self._trouble(f"could not record a {op} write for MLflow", exc)
            return
        if drain:
            self.drain(force=force)

    def _route_store_logs(self) -> None:
        """Send the store's own error logs to the spool's error log, not the console.

        MLflow logs every failed sqlite statement with its traceback, and urllib3 every retry of
        a refused connection; for a fault this tracker handles, the console gets its one line.
        """
        import logging

        try:
            self.spool.folder.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(self.spool.error_log)
        except OSError:
            return
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        for name in _STORE_LOGGERS:
            logger = logging.getLogger(name)
            # One search at a time per process owns them: an earlier search's log is let go.
            old = _ROUTED.pop(name, None)
            if old is not None:
                logger.removeHandler(old)
                old.close()
            logger.addHandler(handler)
            logger.propagate = False
            _ROUTED[name] = handler

    def _trouble(self, what: str, exc: BaseException) -> None:
        where = self._log(what, exc)
        self.say(f"tracking: {what} (details: {where})")

    def _log(self, what: str, exc: BaseException) -> Path | str:
        try:
            self.spool.folder.mkdir(parents=True, exist_ok=True)
            with open(self.spool.error_log, "a") as fh:
                fh.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {what}\n")
                fh.write("".join(traceback.format_exception(exc)))
            return self.spool.error_log
        except OSError:
            return "no log: the disk refused it too"


__all__ = ["DurableTracker", "RETRY_AFTER_S", "TAG_SPOOL_ID", "sync_command"]
