"""Where a search's GPU time went: one server's record (:class:`GpuTime`) and the one count.

A user pays for a search in GPU hours, and every server a search starts holds its GPUs from
spawn until its process group is gone, whether it measured or crashed. :class:`GpuTime` is one
server's record, in four parts that follow one another without a gap worth counting:

- ``startup``: spawn to healthy (or to the failed start's end: a crash, a timeout);
- ``warmup``: the workload's warm-up prompts and the stabilising passes;
- ``measure``: the measured repeats, the scrapes around them and the server info read after;
- ``teardown``: stop to the process group gone (:class:`~autotune.server.process.ServerProcess`
  times it).

A part the server never reached is None (a start-up crash has start-up and teardown seconds
only): not a 0 that would read as an instant warm-up. ``gpu_s`` is the known parts' wall
seconds times the GPUs held (``tp_size``, 1 when unset).

:func:`count` is the one place a search's GPU-seconds are added up. It takes the events of a
search (:class:`Spent`: a stage, a part, seconds, GPUs), so a live search (:func:`events_of` its
servers' records) and ``bench_search``'s replay (a time model's events) are counted alike, and
a rule that changes which servers run (a stop rule, sequential rounds) changes only the events.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FLAT_NAMES", "GpuTime", "GpuTotals", "PartClock", "Spent", "count", "events_of", "flat", "gpus_of",
           "PARTS", "SERVER_PARTS", "STAGES", "STARTUP", "WARMUP", "MEASURE", "TEARDOWN", "OVERHEAD",
           "TRIALS", "BASELINES", "FINALISTS"]

STARTUP, WARMUP, MEASURE, TEARDOWN, OVERHEAD = "startup", "warmup", "measure", "teardown", "overhead"
#: The parts of one server's life, in order.
SERVER_PARTS = (STARTUP, WARMUP, MEASURE, TEARDOWN)
#: Every part a search pays for: a server's, and the tuner's overhead between trials (a trial's
#: slot holds its GPUs while the tuner suggests, starts the trial process and logs).
PARTS = (*SERVER_PARTS, OVERHEAD)
TRIALS, BASELINES, FINALISTS = "trials", "baselines", "finalists"
#: What a search paid for: the trials the sampler asked for, the group baselines they measured,
#: and the finalists' confirmation (each re-measurement and its fresh baseline).
STAGES = (TRIALS, BASELINES, FINALISTS)


def gpus_of(tp_size: Any) -> int:
    """The GPUs a server holds: its ``tp_size``, 1 when unset.

    Raises:
        ValueError: A ``tp_size`` below 1.
    """
    if tp_size is None:
        return 1
    gpus = int(tp_size)
    if gpus < 1:
        raise ValueError(f"tp_size must be >= 1, got {tp_size!r}")
    return gpus


@dataclass(frozen=True)
class GpuTime:
    """Where one server's GPU time went (wall seconds per part; None for a part not reached).

    Attributes:
        gpus: GPUs the server held (``tp_size``; 1 when unset).
        startup_s: Spawn to healthy, or to the end of a failed start.
        warmup_s: Warm-up prompts and stabilising passes.
        measure_s: Measured repeats with their scrapes.
        teardown_s: Stop to process group gone.
    """

    gpus: int = 1
    startup_s: float | None = None
    warmup_s: float | None = None
    measure_s: float | None = None
    teardown_s: float | None = None

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"gpus must be >= 1, got {self.gpus}")
        for part in SERVER_PARTS:
            value = self.seconds(part)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{part}_s must be a finite number >= 0 or None, got {value!r}")

    def seconds(self, part: str) -> float | None:
        """Wall seconds of one of :data:`SERVER_PARTS`; None when the server never reached it."""
        if part not in SERVER_PARTS:
            raise ValueError(f"unknown part {part!r}; expected one of {', '.join(SERVER_PARTS)}")
        value: float | None = getattr(self, f"{part}_s")
        return value

    @property
    def wall_s(self) -> float:
        """Wall seconds the server held its GPUs: the known parts together."""
        return math.fsum(v for v in (self.seconds(p) for p in SERVER_PARTS) if v is not None)

    @property
    def gpu_s(self) -> float:
        """GPU-seconds: :attr:`wall_s` times :attr:`gpus`."""
        return self.wall_s * self.gpus

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``gpu_s`` included for readers of the JSON)."""
        return {"gpus": self.gpus, **{f"{p}_s": self.seconds(p) for p in SERVER_PARTS},
                "gpu_s": self.gpu_s}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuTime:
        """The record :meth:`to_dict` wrote (``gpu_s`` is derived, so not read back)."""
        return cls(gpus=int(data.get("gpus") or 1),
                   **{f"{p}_s": _seconds(data.get(f"{p}_s")) for p in SERVER_PARTS})


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


#: A record's figures as one row's columns (``trials.csv``) and a trial run's metrics (MLflow).
FLAT_NAMES = ("gpus", "gpu_s", *(f"time_{p}_s" for p in SERVER_PARTS))


def flat(record: GpuTime | None) -> dict[str, float | None]:
    """A record's :data:`FLAT_NAMES`: GPUs, GPU-seconds, each part's wall seconds (None where
    unknown, every one of them without a record)."""
    if record is None:
        return dict.fromkeys(FLAT_NAMES)
    return {"gpus": float(record.gpus), "gpu_s": record.gpu_s,
            **{f"time_{p}_s": record.seconds(p) for p in SERVER_PARTS}}


class PartClock:
    """Splits a running server's time between warm-up and measurement as they happen.

    :meth:`enter` closes the part running and starts another, so consecutive parts leave no gap;
    :meth:`close` ends the last one (at the moment the server's stop began). Seconds survive an
    exception: a crash mid-measurement keeps what it measured until then.
    """

    def __init__(self) -> None:
        self._spent: dict[str, float] = {}
        self._part: str | None = None
        self._since = 0.0

    def enter(self, part: str) -> None:
        """End the running part now and start ``part``."""
        now = time.monotonic()
        self._end(now)
        self._part, self._since = part, now
        self._spent.setdefault(part, 0.0)

    def close(self, at: float | None = None) -> None:
        """End the running part at ``at`` (``time.monotonic``; now when None)."""
        self._end(time.monotonic() if at is None else at)
        self._part = None

    def _end(self, now: float) -> None:
        if self._part is not None:
            self._spent[self._part] += max(now - self._since, 0.0)

    def transfer(self, seconds: float, *, source: str, target: str) -> None:
        """Count ``seconds`` already spent in ``source`` (ended) as ``target``'s: a stabilising pass
        kept as the first round was measurement, though it ran while warm-up was the part.

        Raises:
            ValueError: ``seconds`` negative, or more than ``source`` has ended with.
        """
        have = self._spent.get(source, 0.0)
        if seconds < 0 or seconds > have + 1e-9:
            raise ValueError(f"cannot move {seconds!r} s from {source!r}, which has {have!r} s")
        self._spent[source] = have - seconds
        self._spent[target] = self._spent.get(target, 0.0) + seconds

    def seconds(self, part: str) -> float | None:
        """Seconds spent in ``part`` until it last ended; None when it was never entered."""
        return self._spent.get(part)

    def so_far(self, part: str) -> float | None:
        """Seconds spent in ``part`` up to now, the running part's open stretch included (a
        round's report reads it mid-measurement); None when it was never entered."""
        spent = self._spent.get(part)
        if spent is not None and part == self._part:
            spent += max(time.monotonic() - self._since, 0.0)
        return spent


@dataclass(frozen=True)
class Spent:
    """One event of a search's GPU bill: ``seconds`` of wall time on ``gpus`` GPUs.

    Attributes:
        stage: One of :data:`STAGES`.
        part: One of :data:`PARTS`.
        seconds: Wall seconds (>= 0).
        gpus: GPUs held meanwhile (>= 1).
    """

    stage: str
    part: str
    seconds: float
    gpus: int = 1

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"unknown stage {self.stage!r}; expected one of {', '.join(STAGES)}")
        if self.part not in PARTS:
            raise ValueError(f"unknown part {self.part!r}; expected one of {', '.join(PARTS)}")
        if not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"seconds must be a finite number >= 0, got {self.seconds!r}")
        if self.gpus < 1:
            raise ValueError(f"gpus must be >= 1, got {self.gpus}")

    @property
    def gpu_s(self) -> float:
        return self.seconds * self.gpus


def events_of(record: GpuTime | None, stage: str) -> list[Spent]:
    """One server's record as events of ``stage`` (none for a part it never reached, or for no
    record: nothing was started)."""
    if record is None:
        return []
    return [Spent(stage, part, s, record.gpus) for part in SERVER_PARTS
            if (s := record.seconds(part)) is not None]


@dataclass(frozen=True)
class GpuTotals:
    """A search's GPU-seconds and where they went.

    Attributes:
        gpu_s: Every event's GPU-seconds together.
        by_part: GPU-seconds per :data:`PARTS` entry (each present, 0.0 when nothing was spent).
        by_stage: GPU-seconds per :data:`STAGES` entry (likewise).
        servers: Servers started per stage (records with a start-up).
        split: GPU-seconds per stage, then per part (``split["trials"]["startup"]``).
    """

    gpu_s: float
    by_part: dict[str, float] = field(default_factory=dict)
    by_stage: dict[str, float] = field(default_factory=dict)
    servers: dict[str, int] = field(default_factory=dict)
    split: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"gpu_s": self.gpu_s, "by_part": dict(self.by_part), "by_stage": dict(self.by_stage),
                "servers": dict(self.servers), "split": {s: dict(p) for s, p in self.split.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuTotals:
        """The totals :meth:`to_dict` wrote (other keys ignored)."""
        return cls(gpu_s=float(data["gpu_s"]), by_part=dict(data.get("by_part") or {}),
                   by_stage=dict(data.get("by_stage") or {}), servers=dict(data.get("servers") or {}),
                   split={s: dict(p) for s, p in (data.get("split") or {}).items()})

    def metrics(self) -> dict[str, float]:
        """Flat metric names for a search's MLflow run: ``gpu_s_total``, ``gpu_s_<part>``,
        ``gpu_s_<stage>``, ``servers_<stage>``."""
        out = {"gpu_s_total": self.gpu_s}
        out.update({f"gpu_s_{p}": v for p, v in self.by_part.items()})
        out.update({f"gpu_s_{s}": v for s, v in self.by_stage.items()})
        out.update({f"servers_{s}": float(n) for s, n in self.servers.items()})
        return out


def count(events: Iterable[Spent]) -> GpuTotals:
    """Add up a search's events: the one count of GPU-seconds, for a search and its replay alike.

    A server is counted as started by its ``startup`` event. Sums are exact (``math.fsum``), so
    the parts add up to the total, and so do the stages.
    """
    cells: dict[tuple[str, str], list[float]] = {(s, p): [] for s in STAGES for p in PARTS}
    servers = dict.fromkeys(STAGES, 0)
    for e in events:
        cells[(e.stage, e.part)].append(e.gpu_s)
        if e.part == STARTUP:
            servers[e.stage] += 1

    def total(stages: Iterable[str], parts: Iterable[str]) -> float:
        return math.fsum(v for s in stages for p in parts for v in cells[(s, p)])

    return GpuTotals(gpu_s=total(STAGES, PARTS), by_part={p: total(STAGES, (p,)) for p in PARTS},
                     by_stage={s: total((s,), PARTS) for s in STAGES}, servers=servers,
                     split={s: {p: total((s,), (p,)) for p in PARTS} for s in STAGES})
