"""A search's MLflow writes made durable: spooled first, replayed in order, and never raising.

:class:`DurableTracker` stands in front of a :class:`~autotune.tracking.tracker.Tracker` for
everything a search writes once trials run (trial results, lost attempts, facts on the search
run, its end). Each write becomes a :class:`~autotune.tracking.spool.Record` in the search's
spool, and the pending records are then replayed to MLflow in order. A store that fails (a
tracking server gone, a full disk) costs nothing but delay: the records wait in the spool and are
replayed with the next write after a pause, at the search's end, by a resumed search, or by
``autotune sync``. Ray must never see an exception from tracking (Ray would stop the trial and
run it again), so no write here raises; one console line says what happened, and the traceback
goes to the spool's ``tracking-errors.log``.

Replays are idempotent: a trial's run is found by its ``autotune.trial_id`` tag, a record carries
its attempt number and its time, MLflow drops a metric it already holds with the same step, time
and value, and tags, params and artifacts are written with the same values again.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.tracking.spool import Record, Spool

#: Loggers that report store faults the durable tracker handles (see ``_route_store_logs``).
_STORE_LOGGERS = ("mlflow.store.db.utils", "urllib3.connectionpool", "mlflow.utils.rest_utils")

_ROUTED: dict[str, Any] = {}  # logger name -> the handler this process routed it to

#: Seconds between replays after MLflow failed (a write in between is only spooled).
RETRY_AFTER_S = 5.0


def sync_command(name: str, root: str, tracking_uri: str | None) -> str:
    """The command that replays a search's pending records (what the summary tells people)."""
    uri = f" --tracking-uri {tracking_uri}" if tracking_uri and not tracking_uri.startswith("sqlite:") else ""
    return f"autotune sync --name {name} --root {root}{uri}"


def _brief(exc: BaseException) -> str:
    """An exception in a few words for a console line: its type and the start of its message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:140]}{'...' if len(text) > 140 else ''}" if text else type(exc).__name__


class DurableTracker:
    """A :class:`~autotune.tracking.tracker.Tracker` whose writes go through a spool.

    Reads (``client``, ``tracking_uri``, ``parent_run_id``, ...) pass through to the tracker.

    Args:
        tracker: The search's tracker, connected, with its search run started.
        folder: The spool's folder (``<run dir>/tracking``).
        say: Prints one console line (the default: stderr).
        retry_after_s: Seconds to wait after MLflow failed before replaying again.
        winner_files: Passed to :meth:`Tracker.finish_search` when a ``finish`` record is replayed.
        study: The search's Optuna study for the ``finish`` record; None rebuilds it from the runs.
        spool: The spool of ``folder`` when the caller has it open already (and locked).
    """

    def __init__(self, tracker: Any, folder: str | os.PathLike[str], *, say: Callable[[str], None] | None = None,
                 retry_after_s: float = RETRY_AFTER_S, winner_files: Callable[..., Mapping[str, str]] | None = None,
                 study: Any = None, spool: Spool | None = None) -> None:
        self.tracker = tracker
        self.spool = spool or Spool(folder)
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.retry_after_s = retry_after_s
        self.winner_files = winner_files
        self.study = study
        self._failing_since: float | None = None
        self._last_try = 0.0
        self._disk_said = False

    def __getattr__(self, name: str) -> Any:
        if name == "tracker":  # not set yet: never look it up on itself
            raise AttributeError(name)
        return getattr(self.tracker, name)

    def begin(self) -> int:
        """Record the search run the spool belongs to, and replay what an earlier driver left.

        Returns:
            The records still pending afterwards.
        """
        t = self.tracker
        self._route_store_logs()
        try:
            self.spool.lock()
            self.spool.write_header({"name": t.name, "tracking_uri": t.tracking_uri, "root": t.root,
                                     "experiment_id": t.experiment_id, "parent_run_id": t.parent_run_id})
        except OSError as exc:
            self._trouble(f"cannot write the tracking spool header in {self.spool.folder}", exc)
        return self.drain(force=True)

    # -- the writes a search makes ---------------------------------------------------------------

    def log_trial(self, trial_id: str, result: Any, *, kind: str | None = None,
                  confirmed: bool | None = None, drain: bool = True) -> None:
        """Spool a trial's result (its next attempt) and, with ``drain``, replay; never raises."""
        self._write("trial", lambda: self._trial_data(trial_id, result, kind, confirmed), drain=drain)

    def attempt_lost(self, trial_id: str, reason: str, *, params: Mapping[str, Any] | None = None,
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

    def finish_search(self, *, study: Any = None, status: str = "FINISHED",
                      sglang_default: Mapping[str, Any] | None = None,
                      winner_files: Callable[..., Mapping[str, str]] | None = None,
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
        try:
            for record in self.spool.pending():
                self.apply(record)
                self.spool.mark_synced(record.seq)
                written += 1
        except Exception as exc:  # noqa: BLE001 - any store failure: the record waits in the spool
            left = self.unsynced()
            if self._failing_since is None:
                self._failing_since = now
                self._trouble(f"MLflow at {self.tracker.tracking_uri} failed a write ({_brief(exc)}); "
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
        if record.op == "trial":
            t.log_trial(d["trial_id"], TrialResult.from_dict(d["result"]), kind=d.get("kind"),
                        confirmed=d.get("confirmed"), attempt=d["attempt"], at_ms=record.at_ms)
        elif record.op == "lost":
            t.log_lost_attempt(d["trial_id"], attempt=d["attempt"], reason=d["reason"],
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

    def _trial_data(self, trial_id: str, result: Any, kind: str | None, confirmed: bool | None) -> dict[str, Any]:
        return {"trial_id": trial_id, "attempt": self.spool.next_attempt(trial_id), "kind": kind,
                "confirmed": confirmed, "result": result.to_dict()}

    def _write(self, op: str, data: Callable[[], dict[str, Any]], *, force: bool = False,
               drain: bool = True) -> None:
        try:
            payload = data()
            key = f"{op}:{payload['trial_id']}#{payload['attempt']}" if "trial_id" in payload else op
            self.spool.append(op, key, payload)
            if self.spool.write_error is not None and not self._disk_said:
                self._disk_said = True
                self._trouble(f"cannot write the tracking spool {self.spool.path}; "
                              f"{len(self.spool.pending())} record(s) held in memory until it can", self.spool.write_error)
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


__all__ = ["DurableTracker", "RETRY_AFTER_S", "sync_command"]
