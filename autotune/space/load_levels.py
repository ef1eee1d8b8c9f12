"""The load levels of a ``workload:``: ``concurrency: [1, 8, 64]`` or ``request_rate: [2, 8]``.

One of the two load keys may be a list; each trial is then measured at every level
(:mod:`autotune.trial.level_results`). :class:`LoadLevel` here is the one definition of a level: its
label (``c8``, ``r2.5``), its key and its field, used by the metrics, ``trials.csv``, the tags, the
summary and the exports.

A concurrency list measures closed-loop load (that many requests in flight); a rate list
measures open-loop Poisson arrivals at each rate (the scalar ``request_rate`` semantics, seeded by
``workload.seed``). A rate, single or listed, caps the requests in flight only where
``concurrency`` is written (:func:`concurrency_of`). ``primary_concurrency`` / ``primary_request_rate``
picks the level the search optimises, by default the first written. These readers check the keys
without loading prompts, for :class:`~autotune.space.workload.Workload` and for code that models a workload.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.errors import ConfigError

__all__ = ["AXES", "CONCURRENCY", "MAX_CONCURRENCY", "MAX_LEVELS", "PRIMARY_KEYS", "REQUEST_RATE",
           "LoadLevel", "as_level", "concurrency_of", "primary_level", "read_levels"]

CONCURRENCY, REQUEST_RATE = "concurrency", "request_rate"
#: The workload keys that take a list of levels.
AXES = (CONCURRENCY, REQUEST_RATE)


@dataclass(frozen=True)
class LoadLevel:
    """One load level: a concurrency (closed loop) or a request rate (open-loop arrivals).

    Attributes:
        axis: ``concurrency`` or ``request_rate`` (the workload key it comes from).
        value: The concurrency (an int) or the requests per second (a float).
    """

    axis: str
    value: int | float

    @property
    def label(self) -> str:
        """``c8`` for concurrency 8, ``r2.5`` for 2.5 requests/s: metric and column suffixes."""
        return f"c{int(self.value)}" if self.axis == CONCURRENCY else f"r{self.value:g}"

    @property
    def key(self) -> str:
        """The level's key in the tag ``autotune.level_status``: a concurrency's number as written
        before rates existed (``"8"``), a rate's label (``"r2.5"``)."""
        return str(int(self.value)) if self.axis == CONCURRENCY else self.label

    @property
    def title(self) -> str:
        """What the axis is called in headings: ``concurrency`` or ``request rate``."""
        return "concurrency" if self.axis == CONCURRENCY else "request rate"

    def describe(self) -> str:
        """``concurrency 8`` or ``request rate 2.5/s``, for messages and reports."""
        if self.axis == CONCURRENCY:
            return f"concurrency {int(self.value)}"
        return f"request rate {self.value:g}/s"

    def field(self) -> dict[str, int | float]:
        """``{"concurrency": 8}`` or ``{"request_rate": 2.5}``: the level in records and rows."""
        return {self.axis: self.value}

    @classmethod
    def of(cls, axis: str, value: Any) -> LoadLevel:
        """A level of ``axis`` (ints for concurrency, floats for rates, so equal levels compare equal)."""
        if axis == CONCURRENCY:
            return cls(axis, int(value))
        if axis == REQUEST_RATE and math.isfinite(float(value)) and float(value) > 0:
            return cls(axis, float(value))
        raise ValueError(f"not a load level: {axis}={value!r}")

    @classmethod
    def of_record(cls, record: dict[str, Any]) -> LoadLevel:
        """The level of a level record or a per-level row (it holds one axis key)."""
        if record.get(REQUEST_RATE) is not None and record.get(CONCURRENCY) is None:
            return cls.of(REQUEST_RATE, record[REQUEST_RATE])
        return cls.of(CONCURRENCY, record[CONCURRENCY])

    @classmethod
    def from_key(cls, key: str) -> LoadLevel:
        """The level of a :attr:`key` (``"8"``, ``"r2.5"``)."""
        if key.startswith("r"):
            return cls.of(REQUEST_RATE, key[1:])
        return cls.of(CONCURRENCY, key)


def as_level(level: LoadLevel | int) -> LoadLevel:
    """A level; a bare int is a concurrency (how levels were named before rates existed)."""
    return level if isinstance(level, LoadLevel) else LoadLevel.of(CONCURRENCY, level)


# A list of levels multiplies every trial's measuring time by its length; past a handful of levels
# a search would spend its budget re-measuring one config.
MAX_LEVELS = 8
MAX_CONCURRENCY = 4096
#: The key naming the optimised level, per axis.
PRIMARY_KEYS = {CONCURRENCY: "primary_concurrency", REQUEST_RATE: "primary_request_rate"}

Bad = Callable[[str, str], ConfigError]


def concurrency_of(spec: Mapping[str, Any]) -> Any:
    """A ``workload:`` section's ``concurrency`` as written, else its default: the one place that
    decides the default.

    Without a request rate the default is 1 (batch-1 latency, closed loop). With a request rate,
    single or a list, it is None: no cap on the requests in flight, as ``sglang.bench_serving
    --request-rate`` (whose ``--max-concurrency`` defaults to none). A cap of 1 there would turn
    the open-loop rate into closed-loop concurrency 1 and the rate would measure nothing of its
    own. The load stays bounded: ``num_prompts`` requests at most, and ``max_duration_s``.

    Args:
        spec: The section as written (without defaults filled in).

    Returns:
        The value to validate: an int, a list of levels, None, or whatever was written.
    """
    if CONCURRENCY in spec:
        return spec[CONCURRENCY]
    return None if spec.get(REQUEST_RATE) is not None else 1


def read_levels(spec: Mapping[str, Any], bad: Bad
                ) -> tuple[tuple[LoadLevel, ...] | None, LoadLevel | None]:
    """``(levels, primary)`` of a ``workload:`` section; ``(None, None)`` without a list.

    Args:
        spec: The section with defaults filled in.
        bad: Builds the :class:`ConfigError` for a key (file, line and field).

    Raises:
        ConfigError: Both keys are lists, a bad list or item, or a primary key that does not fit.
    """
    lists = [axis for axis in AXES if isinstance(spec.get(axis), (list, tuple))]
    if len(lists) > 1:
        raise bad(REQUEST_RATE, "concurrency and request_rate are both lists; levels are of one "
                                "kind: list concurrencies (closed loop) or request rates (open "
                                "loop), and give the other one value")
    axis = lists[0] if lists else None
    for other, key in PRIMARY_KEYS.items():
        if other != axis and spec.get(key) is not None:
            raise bad(key, f"only a list of {other} levels takes a {key}; write "
                           f"{other}: {'[1, 8, 64]' if other == CONCURRENCY else '[2, 8]'}")
    if axis is None:
        return None, None
    levels = _levels(axis, spec[axis], bad)
    return levels, _primary(axis, levels, spec.get(PRIMARY_KEYS[axis]), bad)


def primary_level(spec: Mapping[str, Any] | None) -> LoadLevel | None:
    """The level a ``workload:`` section's search optimises, without loading its prompts; None
    when it lists no levels.

    Raises:
        ConfigError: A bad list or primary key.
    """
    def bad(key: str, msg: str) -> ConfigError:
        return ConfigError(msg, field=f"workload.{key}")

    return read_levels(spec or {}, bad)[1]


def _levels(axis: str, value: Any, bad: Bad) -> tuple[LoadLevel, ...]:
    """The levels of a list, checked item by item (errors name ``concurrency[2]``)."""
    if not value:
        example = "8) or several ([1, 8, 64])" if axis == CONCURRENCY else "4) or several ([2, 8])"
        raise bad(axis, f"an empty list measures nothing; write one level ({example}")
    if len(value) > MAX_LEVELS:
        raise bad(axis, f"{len(value)} levels; at most {MAX_LEVELS} (each level multiplies every "
                        "trial's measuring time)")
    seen: set[LoadLevel] = set()
    out = []
    for i, x in enumerate(value):
        key = f"{axis}[{i}]"
        if axis == CONCURRENCY:
            if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= MAX_CONCURRENCY:
                raise bad(key, f"each level must be an integer from 1 to {MAX_CONCURRENCY}, "
                               f"got {x!r}")
        elif isinstance(x, bool) or not isinstance(x, (int, float)) or not (
                x > 0 and math.isfinite(x)):
            raise bad(key, f"each level must be a finite number of requests per second > 0, "
                           f"got {x!r}")
        level = LoadLevel.of(axis, x)
        if level in seen:
            raise bad(key, f"level {x} is listed twice; list each {axis} once")
        seen.add(level)
        out.append(level)
    return tuple(out)


def _primary(axis: str, levels: tuple[LoadLevel, ...], value: Any, bad: Bad) -> LoadLevel:
    """The level the search optimises: the primary key's, else the first level written."""
    if value is None:
        return levels[0]
    key = PRIMARY_KEYS[axis]
    try:
        whole = isinstance(value, int) or axis != CONCURRENCY  # 4.5 is no concurrency
        level = None if isinstance(value, bool) or not whole else LoadLevel.of(axis, value)
    except (TypeError, ValueError):
        level = None
    if level not in levels:
        raise bad(key, f"must be one of the {axis} levels {[lv.value for lv in levels]}, "
                       f"got {value!r}")
    return level
