"""The load levels of a ``workload:``: ``concurrency: [1, 8, 64]`` or ``request_rate: [2, 8]``.

One of the two load keys may be a list; each trial is then measured at every level
(:mod:`autotune.trial.levels`, where :class:`~autotune.trial.levels.LoadLevel` defines a level).
A concurrency list measures closed-loop load (that many requests in flight); a rate list
measures open-loop Poisson arrivals at each rate (the scalar ``request_rate`` semantics, seeded by
``workload.seed``), capped by the scalar ``concurrency`` as a single rate is (``concurrency: null``
for no cap). ``primary_concurrency`` / ``primary_request_rate`` picks the level the search
optimises, by default the first written. These readers check the keys without loading prompts,
for :class:`~autotune.space.workload.Workload` and for code that models a workload.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from autotune.errors import ConfigError
from autotune.trial.levels import AXES, CONCURRENCY, REQUEST_RATE, LoadLevel

__all__ = ["MAX_CONCURRENCY", "MAX_LEVELS", "PRIMARY_KEYS", "primary_level", "read_levels"]

# A list of levels multiplies every trial's measuring time by its length; past a handful of levels
# a search would spend its budget re-measuring one config.
MAX_LEVELS = 8
MAX_CONCURRENCY = 4096
#: The key naming the optimised level, per axis.
PRIMARY_KEYS = {CONCURRENCY: "primary_concurrency", REQUEST_RATE: "primary_request_rate"}

Bad = Callable[[str, str], ConfigError]


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
    return level  # type: ignore[return-value]
