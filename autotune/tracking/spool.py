"""The durable, append-only record of what a search has to write to MLflow, and what it has written.

A search's MLflow writes go through a spool under its own folder (``<run dir>/tracking/``) first:

``spool.jsonl``
    One JSON record per write the search asked for (``seq``, ``op``, ``key``, ``at_ms``,
    ``data``), appended and fsync'd before anything is sent to MLflow.
``synced.jsonl``
    One ``{"seq": n}`` line per record MLflow has taken, appended and fsync'd after it did.
``search.json``
    Which MLflow search run the records belong to (``tracking_uri``, ``name``,
    ``experiment_id``, ``parent_run_id``), so that a later sync finds it without the driver.
    Both ids are null while the search run's own ``start`` record is pending (MLflow did not
    answer when the search began); replaying that record makes the run and names it here. The
    first ``start`` record names the store too, so a header the disk refused is rebuilt from it
    (``autotune sync``: the run is found by the ``autotune.spool_id`` tag that record gave it).

A record whose ``seq`` is not in ``synced.jsonl`` is pending; replaying a record is idempotent
(:mod:`autotune.tracking.durable`), so a record written to MLflow but not yet marked is simply
written again. A driver killed mid-append leaves a torn last line: reading skips it and the next
append starts on a new line, after a marker line that says the one above was torn, so it stays
skipped. Any other line that is not a record of the right types is kept in
``Spool.bad_lines`` (file and line number) and the records around it are read as usual. When the
disk refuses a write (``ENOSPC``), records wait in memory and are written with the next append that
succeeds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from autotune.errors import cut

_T = TypeVar("_T")
SPOOL = "spool.jsonl"
SYNCED = "synced.jsonl"
HEADER = "search.json"
#: The line an append writes after a torn line it closes: that line was cut short, not garbled.
_TORN = b'{"torn": "the line above was cut short by a writer that was killed"}'
#: The error log a search names in its console lines about tracking faults.
ERROR_LOG = "tracking-errors.log"


@dataclass
class Record:
    """One write a search asked for.

    Attributes:
        seq: Its place in the spool (1, 2, ...): records are replayed in this order.
        op: What to write: ``start``, ``trial``, ``lost``, ``facts``, ``fail`` or ``finish``.
        key: What makes it unique (``trial:<trial id>#<attempt>``, ...), for people reading it.
        at_ms: When it was asked for (ms since the epoch); replays write this same time.
        data: The write's content, JSON-ready.
    """

    seq: int
    op: str
    key: str
    at_ms: int
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return json.dumps({"seq": self.seq, "op": self.op, "key": self.key, "at_ms": self.at_ms,
                           "data": self.data}, default=str, separators=(",", ":")) + "\n"


def _append(path: Path, text: str) -> None:
    """Append ``text`` and fsync; a torn last line left by a killed writer is closed first."""
    with open(path, "ab+") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                # The marker tells readers the line above is a torn write, not a garbled record.
                text = "\n" + _TORN.decode() + "\n" + text
        fh.write(text.encode())
        fh.flush()
        os.fsync(fh.fileno())


@dataclass(frozen=True)
class BadLine:
    """A spool line that could not be read as a record.

    Attributes:
        path: The file it is in.
        line: Its 1-based line number.
        why: What is wrong with it, with the value cut (:func:`autotune.errors.cut`).
    """

    path: Path
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}"


def _parse_record(item: Any) -> Record:
    """One spool record from its parsed JSON, its types checked.

    Raises:
        ValueError: Not an object, or a field of the wrong type (said with the field's name).
    """
    if not isinstance(item, dict):
        raise ValueError(f"not a JSON object but {type(item).__name__}")
    want = {"seq": int, "op": str, "key": str, "at_ms": int, "data": dict}
    for name, kind in want.items():
        value = item.get(name)
        # bool is an int to isinstance, and never a sequence number or a time.
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"{name!r} must be {kind.__name__}, got {cut(repr(value))}")
    if item["seq"] < 1:
        raise ValueError(f"'seq' must be >= 1, got {item['seq']}")
    return Record(item["seq"], item["op"], item["key"], item["at_ms"], item["data"])


def _read_lines(path: Path, parse: Callable[[Any], _T]) -> tuple[list[_T], list[BadLine]]:
    """The records of a JSON-lines file, and the lines that are not records.

    A torn last line (no newline after it: a writer killed mid-append) is skipped without a word;
    any other unreadable line is a :class:`BadLine`, and the lines around it are still read.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], []
    lines = raw.split(b"\n")
    torn = {i for i in range(len(lines) - 1) if lines[i + 1] == _TORN}
    if lines[-1]:
        torn.add(len(lines) - 1)  # the text after the last newline: a write cut short just now
    out: list[_T] = []
    bad: list[BadLine] = []
    for index, line in enumerate(lines):
        if not line.strip() or line == _TORN:
            continue
        try:
            out.append(parse(json.loads(line)))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors too
            if index not in torn:
                bad.append(BadLine(path, index + 1, cut(str(exc))))
    return out, bad


def _parse_mark(item: Any) -> int:
    if not isinstance(item, dict) or not isinstance(item.get("seq"), int) or isinstance(item.get("seq"), bool):
        raise ValueError(f"not a {{\"seq\": n}} mark: {cut(repr(item))}")
    return int(item["seq"])


class Spool:
    """The spool of one search folder (see the module docstring).

    Args:
        folder: The spool's folder (``<run dir>/tracking``); made when first written.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.path = self.folder / SPOOL
        self.error_log = self.folder / ERROR_LOG
        self._records, bad = _read_lines(self.path, _parse_record)
        marks, bad_marks = _read_lines(self.folder / SYNCED, _parse_mark)
        self._synced: set[int] = set(marks)
        #: Lines of spool.jsonl and synced.jsonl that are not records (a torn last line is not
        #: one): each is said by whoever replays, and a spool with any is never called complete.
        self.bad_lines: list[BadLine] = bad + bad_marks
        self._unwritten: list[Record] = []  # appended, but the disk refused them so far
        self._unmarked: list[int] = []  # synced, but not yet in synced.jsonl
        self.write_error: OSError | None = None

    # -- writing -------------------------------------------------------------------------------

    def append(self, op: str, key: str, data: dict[str, Any]) -> Record:
        """Add a record and try to make it durable; never raises for a disk that refuses.

        Returns:
            The record. If the disk refused it, it waits in memory (``write_error`` says why)
            and is written with the next append or :meth:`retry_writes` that succeeds.
        """
        seq = max([r.seq for r in self._records] + [0]) + 1
        record = Record(seq, op, key, int(time.time() * 1000), data)
        self._records.append(record)
        self._unwritten.append(record)
        self.retry_writes()
        return record

    def mark_synced(self, seq: int) -> None:
        """Note that MLflow holds record ``seq`` (kept in memory if the disk refuses)."""
        self._synced.add(seq)
        self._unmarked.append(seq)
        self.retry_writes()

    def retry_writes(self) -> bool:
        """Write what waits in memory; True when nothing waits any more."""
        try:
            if self._unwritten:
                self.folder.mkdir(parents=True, exist_ok=True)
                _append(self.path, "".join(r.line() for r in self._unwritten))
                self._unwritten = []
            if self._unmarked:
                _append(self.folder / SYNCED, "".join(json.dumps({"seq": s}) + "\n" for s in self._unmarked))
                self._unmarked = []
        except OSError as exc:
            self.write_error = exc
            return False
        self.write_error = None
        return True

    def write_header(self, header: dict[str, Any]) -> None:
        """Record which MLflow search run the records belong to (atomic replace).

        Raises:
            OSError: The disk refused it (the caller decides what that costs).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / (HEADER + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(json.dumps(header, indent=2))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.folder / HEADER)

    def lock(self) -> bool:
        """Take this spool for this process (held until it exits); False if another holds it.

        A search holds its spool while it runs, so ``autotune sync`` leaves a live search's
        records to that search.
        """
        import fcntl

        self.folder.mkdir(parents=True, exist_ok=True)
        fh = open(self.folder / ".lock", "w")  # noqa: SIM115 - kept open: the lock lives with it
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            return False
        self._lock_file = fh
        return True

    # -- reading -------------------------------------------------------------------------------

    def header(self) -> dict[str, Any] | None:
        """The search run the records belong to, None if none was recorded."""
        try:
            data = json.loads((self.folder / HEADER).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def pending(self) -> list[Record]:
        """The records MLflow does not hold yet, in order."""
        return [r for r in self._records if r.seq not in self._synced]

    def records(self) -> list[Record]:
        """Every record, in order."""
        return list(self._records)

    def next_attempt(self, trial_id: str) -> int:
        """The attempt number of ``trial_id``'s next record (1 for its first)."""
        return 1 + sum(1 for r in self._records
                       if r.op in ("trial", "lost") and r.data.get("trial_id") == trial_id)


__all__ = ["ERROR_LOG", "HEADER", "BadLine", "Record", "SPOOL", "SYNCED", "Spool"]
