"""What the profile reads from a server: :class:`MetricsSnapshot` and the deltas between two.

:func:`scrape` (and :func:`scrape_sync`) take ``/metrics`` and ``/server_info`` at one moment;
a missing endpoint gives a snapshot with None parts and ``error`` set, not an exception. The
delta helpers pick series by label *name*, never by position, and prefer the rank-0 series of a
TP/PP/DP group (ranks run the cycle in lock step). Which SGLang families are read and what they
mean is in :mod:`autotune.profile.phases`, which builds the profile from two snapshots; the
scraping is apart so that the profile's arithmetic can be tested on snapshots without a server.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from autotune.errors import BenchError
from autotune.figures import finite
from autotune.profile.prom import Exposition, parse_exposition

_RANK_LABELS = ("tp_rank", "pp_rank", "dp_rank", "attn_tp_rank", "attn_dp_rank", "moe_ep_rank")


@dataclass(frozen=True)
class MetricsSnapshot:
    """``/metrics`` and ``/server_info`` at one moment.

    Attributes:
        t: When it was taken (``time.perf_counter``).
        exposition: The parsed metrics page; None when ``/metrics`` was unavailable.
        server_info: The ``/server_info`` JSON; None when unavailable.
        error: Why something was unavailable, if it was.
    """

    t: float
    exposition: Exposition | None
    server_info: Mapping[str, Any] | None = None
    error: str | None = None

    def counter_total(self, name: str) -> float | None:
        """Sum of a counter over every label set; 0.0 if declared without series; else None."""
        if self.exposition is None:
            return None
        series = self.exposition.series(name)
        if series:
            return math.fsum(s.value for s in series)
        return 0.0 if self.exposition.declared(name) else None

    def avg_spec_accept_length(self) -> float | None:
        """``/server_info`` ``internal_states[0].avg_spec_accept_length``, if reported."""
        info = self.server_info or {}
        states = info.get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], Mapping):
            v = states[0].get("avg_spec_accept_length")
            return finite(v)
        return None


def _snapshot(t: float, metrics: httpx.Response | Exception,
              info: httpx.Response | Exception | None) -> MetricsSnapshot:
    errors = []
    expo = None
    if isinstance(metrics, Exception):
        errors.append(f"/metrics: {type(metrics).__name__}: {metrics}")
    elif metrics.status_code != 200:
        errors.append(f"/metrics: HTTP {metrics.status_code} (is --enable-metrics set?)")
    else:
        try:
            expo = parse_exposition(metrics.text)
        except ValueError as exc:
            raise BenchError(f"malformed /metrics page: {exc}") from exc
    server_info = None
    if isinstance(info, Exception):
        errors.append(f"/server_info: {type(info).__name__}: {info}")
    elif info is not None:
        if info.status_code == 200:
            try:
                server_info = info.json()
            except ValueError:
                errors.append("/server_info: not JSON")
        else:
            errors.append(f"/server_info: HTTP {info.status_code}")
    return MetricsSnapshot(t=t, exposition=expo, server_info=server_info,
                           error="; ".join(errors) or None)


async def scrape(client: httpx.AsyncClient, base_url: str, *,
                 server_info: bool = True) -> MetricsSnapshot:
    """Take a snapshot of ``/metrics`` (and ``/server_info``) over an async client.

    Missing endpoints give a snapshot with None parts and ``error`` set; a malformed metrics
    page raises :class:`~autotune.errors.BenchError`.
    """
    base = base_url.rstrip("/")
    t = time.perf_counter()
    metrics: httpx.Response | Exception
    info: httpx.Response | Exception | None = None
    try:
        metrics = await client.get(base + "/metrics")
    except httpx.HTTPError as exc:
        metrics = exc
    if server_info:
        try:
            info = await client.get(base + "/server_info")
        except httpx.HTTPError as exc:
            info = exc
    return _snapshot(t, metrics, info)


def scrape_sync(client: httpx.Client, base_url: str, *,
                server_info: bool = True) -> MetricsSnapshot:
    """:func:`scrape` over a synchronous client."""
    base = base_url.rstrip("/")
    t = time.perf_counter()
    metrics: httpx.Response | Exception
    info: httpx.Response | Exception | None = None
    try:
        metrics = client.get(base + "/metrics")
    except httpx.HTTPError as exc:
        metrics = exc
    if server_info:
        try:
            info = client.get(base + "/server_info")
        except httpx.HTTPError as exc:
            info = exc
    return _snapshot(t, metrics, info)


def _key(labels: Mapping[str, str], drop: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != drop))


def grouped_deltas(before: Exposition | None, after: Exposition, name: str,
                    by: str) -> dict[tuple, dict[str, float]] | None:
    """Per label set (minus ``by``), the delta of each ``by`` value. None on a counter reset."""
    prev: dict[tuple, float] = {}
    if before is not None:
        for s in before.series(name):
            prev[_key(s.labels, "")] = s.value
    out: dict[tuple, dict[str, float]] = {}
    for s in after.series(name):
        d = s.value - prev.get(_key(s.labels, ""), 0.0)
        if d < 0:
            return None  # the server restarted between the snapshots
        group = out.setdefault(_key(s.labels, by), {})
        cat = s.labels.get(by, "")
        group[cat] = group.get(cat, 0.0) + d
    return out


def _is_rank0(key: tuple[tuple[str, str], ...]) -> bool:
    return all(v == "0" for k, v in key if k in _RANK_LABELS)


def pick_group(groups: Mapping[tuple, Mapping[str, float]],
               prefer: tuple | None = None) -> tuple | None:
    """The label set to read: ``prefer`` if there, else the largest rank-0 set (any, if none)."""
    if not groups:
        return None
    if prefer is not None and prefer in groups:
        return prefer
    rank0 = [k for k in groups if _is_rank0(k)]
    pool = rank0 or list(groups)
    return max(pool, key=lambda k: (sum(groups[k].values()), k))


def delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> float | None:
    """A counter's increase between two snapshots, over every label set; None if unknown."""
    a = after.counter_total(name)
    if a is None or before.exposition is None:
        return None  # a failed "before" scrape is unknown, not zero: warm-up would leak in
    b = before.counter_total(name)
    b = 0.0 if b is None else b  # a page without the counter: not yet incremented
    return None if a < b else a - b


__all__ = ["MetricsSnapshot", "delta", "grouped_deltas", "pick_group", "scrape", "scrape_sync"]
