"""The load a server really ran over a measured window, against the concurrency the client asked.

SGLang caps its running batch (``max_running_requests``: 48 by itself for a speculative config in
0.5.17, :data:`autotune.sglang.speculative.MAX_RUNNING_REQUESTS_WITH_SPEC`); a request beyond the cap
waits in its queue. A closed loop of 64 then runs 48, queues 16, and ends with a tail of the 16
alone: a figure taken at "concurrency 64" that was not. :class:`LoadSampler` polls the server's
gauges (``sglang:num_running_reqs``, ``sglang:num_queue_reqs``) during the window;
:func:`load_window` adds the cap (``/server_info``) and the client's own in-flight timeline and
gives a :class:`LoadWindow`; :func:`trial_load` is the one summary of a trial's windows, the figures
that the result, the verdict, the console, ``summary.md``, MLflow and ``trials.csv`` show.

The gauges are sampled, so a short dip can fall between samples; the client's timeline is exact
for what the client sent. SGLang refreshes its gauges when it logs a decode batch, so on a real
server they lag by up to its log interval; the cap from ``/server_info`` does not.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from autotune.bench.records import in_flight_steps
from autotune.figures import finite
from autotune.profile.prom import Exposition, parse_exposition
from autotune.sglang import metrics

#: Seconds between two polls of ``/metrics`` during a window; small against a decode batch's life.
DEFAULT_INTERVAL_S = 0.1
_OTHER_RANKS = ("tp_rank", "pp_rank", "attn_tp_rank", "moe_ep_rank")


@dataclass(frozen=True)
class LoadSample:
    """The server's gauges at one moment (``time.perf_counter``); None where not reported."""

    t: float
    running: float | None
    queued: float | None


def gauges(expo: Exposition, t: float) -> LoadSample:
    """Running and queued requests of one ``/metrics`` page, summed over data-parallel ranks.

    Only the first rank of each TP/PP group reports, as SGLang does; a page without the gauge
    gives None, never 0.
    """
    def total(name: str) -> float | None:
        vals = [s.value for s in expo.series(name)
                if all(s.labels.get(k, "0") == "0" for k in _OTHER_RANKS)]
        return math.fsum(vals) if vals else None

    return LoadSample(t=t, running=total(metrics.NUM_RUNNING_REQS), queued=total(metrics.NUM_QUEUE_REQS))


class LoadSampler:
    """Polls ``/metrics`` for the load gauges between :meth:`start` and :meth:`stop`.

    Args:
        client: The trial's HTTP client.
        base_url: ``http://host:port``.
        interval_s: Seconds between polls.
    """

    def __init__(self, client: httpx.AsyncClient, base_url: str, *,
                 interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._client = client
        self._url = base_url.rstrip("/") + "/metrics"
        self._interval = interval_s
        self._samples: list[LoadSample] = []
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        while True:
            t = time.perf_counter()
            try:
                resp = await self._client.get(self._url)
                if resp.status_code == 200:
                    self._samples.append(gauges(parse_exposition(resp.text), t))
            except (httpx.HTTPError, ValueError):
                pass  # a missed poll is a gap in the samples, not a zero
            await asyncio.sleep(self._interval)

    def start(self) -> None:
        """Begin polling (inside a running event loop)."""
        if self._task is not None:
            raise ValueError("the load sampler is already running")
        self._samples = []
        self._task = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> list[LoadSample]:
        """Stop polling; the samples taken since :meth:`start`."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        return list(self._samples)


def server_cap(server_info: Mapping[str, Any] | None) -> int | None:
    """The running-request cap the server settled on, from ``/server_info``; None if not said.

    The scheduler's ``effective_max_running_requests_per_dp`` (after memory sizing) wins over the
    resolved server argument ``max_running_requests``; data-parallel ranks each hold their own.
    """
    info = server_info or {}
    states = info.get("internal_states")
    effective = None
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        effective = finite(states[0].get("effective_max_running_requests_per_dp"))
    if effective is not None:
        dp = finite(info.get("dp_size")) or 1
        return int(effective * dp)
    cap = finite(info.get("max_running_requests"))
    return int(cap) if cap is not None else None


def client_tail_share(spans: Sequence[tuple[float, float]], concurrency: int) -> float | None:
    """Share of the window (first send to last end) with fewer than ``concurrency`` in flight.

    Args:
        spans: ``(start, end)`` of every request the client sent in the window.
        concurrency: What the client was asked to keep in flight.
    """
    if not spans or concurrency < 1:
        return None
    t0 = min(s for s, _ in spans)
    t1 = max(e for _, e in spans)
    if not t1 > t0:
        return None
    below = 0.0
    inflight = 0
    last = t0
    for t, now in in_flight_steps([s for s, _ in spans], [e for _, e in spans]):
        if inflight < concurrency:
            below += t - last
        inflight = now
        last = t
    return below / (t1 - t0)


@dataclass(frozen=True)
class LoadWindow:
    """The load of one measured window.

    Attributes:
        asked: The concurrency the client was asked for; None for an uncapped open loop.
        cap: The server's running-request cap (``/server_info``); None when not reported.
        running_max, running_p50: Running requests over the samples; None without samples.
        queued_max: Most requests seen waiting in the server's queue; None without samples.
        queued_p50: Requests waiting, the median of the samples that saw a queue (the standing
            queue behind a cap, not the burst of a closed loop's first sends); 0 when none did.
        queued_share: Share of the samples with a request waiting; None without samples.
        server_tail_share: Share of the samples running fewer than ``min(asked, cap)``. The gauge
            also reads below it between one request's end and the next one's admission, with no
            tail (24-26% of the samples on an H100 at concurrency 16 and 64, the client's tail 0.03-0.23%).
        client_tail_share: Share of the window the client had fewer than ``min(asked, cap)`` in
            flight: the tail, from the client's own timeline (what the note says).
        samples: Polls of ``/metrics`` that answered.
    """

    asked: int | None
    cap: int | None
    running_max: float | None
    running_p50: float | None
    queued_max: float | None
    queued_p50: float | None
    queued_share: float | None
    server_tail_share: float | None
    client_tail_share: float | None
    samples: int

    @property
    def sustainable(self) -> int | None:
        """The most the server could run of what was asked: ``min(asked, cap)``."""
        if self.asked is None:
            return self.cap
        return self.asked if self.cap is None else min(self.asked, self.cap)

    @property
    def capped(self) -> bool:
        """Whether the server held back part of the asked load.

        Its cap is below the ask; or, when it does not say its cap, it never ran all that was
        asked while requests waited in at least half the samples. A request that arrives during a
        forward waits until the next one on any server, so a queue seen now and then is not a cap.
        """
        if self.asked is not None and self.cap is not None:
            return self.cap < self.asked
        if self.queued_share is None or self.queued_share < 0.5:
            return False
        return self.asked is None or self.running_max is None or self.running_max < self.asked


def load_window(samples: Sequence[LoadSample], spans: Sequence[tuple[float, float]], *,
                asked: int | None, cap: int | None) -> LoadWindow:
    """One window's :class:`LoadWindow` from its gauge samples and the client's request spans.

    Samples taken before the first request was sent or after the last one ended are not the
    window's (the sampler starts before the client and stops after it) and are left out.
    """
    if spans:
        first, last = min(s for s, _ in spans), max(e for _, e in spans)
        samples = [s for s in samples if first <= s.t <= last]
    running = [s.running for s in samples if s.running is not None]
    queued = [s.queued for s in samples if s.queued is not None]
    window = LoadWindow(asked=asked, cap=cap, running_max=max(running) if running else None,
                        running_p50=statistics.median(running) if running else None,
                        queued_max=max(queued) if queued else None,
                        queued_p50=(statistics.median([q for q in queued if q > 0] or [0.0])
                                    if queued else None),
                        queued_share=sum(1 for q in queued if q > 0) / len(queued) if queued else None,
                        server_tail_share=None, client_tail_share=None, samples=len(samples))
    full = window.sustainable
    tail = (sum(1 for r in running if r < full) / len(running)) if running and full else None
    # Below what the server could run, not what was asked: behind a cap the client keeps all it was
    # asked in flight (the rest queued) until the last requests drain, and that drain is the tail.
    client = client_tail_share(spans, full) if asked and full else None
    return LoadWindow(**{**asdict(window), "server_tail_share": tail, "client_tail_share": client})


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def trial_load(windows: Sequence[LoadWindow]) -> dict[str, Any] | None:
    """The one summary of a trial's windows: what the result records and every view shows.

    ``ran`` is the most the server ran at once (the cap when no sample saw more); ``queued`` the
    requests waiting while any waited (median); the tail shares are medians over the windows;
    ``capped`` is true when any window was (:attr:`LoadWindow.capped`); ``capped_windows`` counts
    them; ``note`` is the line people read ("ran 48 of 64; 16 queued; 41% of the window was tail").
    """
    if not windows:
        return None
    asked = windows[0].asked
    caps = [w.cap for w in windows if w.cap is not None]
    cap = min(caps) if caps else None
    seen = [w.running_max for w in windows if w.running_max is not None]
    ran: float | None = max(seen) if seen else cap
    if ran is not None and asked is not None:
        ran = min(ran, asked)
    queued = _median([w.queued_p50 for w in windows])
    tail = _median([w.server_tail_share for w in windows])
    client_tail = _median([w.client_tail_share for w in windows])
    capped = [w for w in windows if w.capped]
    out: dict[str, Any] = {
        "asked": asked, "cap": cap, "ran": None if ran is None else int(ran),
        "queued": None if queued is None else round(queued),
        "tail_pct": None if tail is None else 100.0 * tail,
        "client_tail_pct": None if client_tail is None else 100.0 * client_tail,
        "capped": bool(capped), "capped_windows": len(capped), "windows": len(windows),
        "samples": sum(w.samples for w in windows)}
    out["note"] = load_note(out)
    return out


def load_note(load: Mapping[str, Any] | None) -> str | None:
    """The line that flags a capped trial; None for one whose server ran what was asked."""
    if not load or not load.get("capped"):
        return None
    ran, asked = load.get("ran"), load.get("asked")
    parts = [f"ran {'?' if ran is None else ran} of {'?' if asked is None else asked}"]
    if load.get("queued") is not None:
        parts.append(f"{load['queued']} queued")
    if load.get("cap") is not None:
        parts.append(f"server cap {load['cap']}")
    # The client's timeline is exact; the gauge's share is the fallback (an open loop has no ask).
    tail = load.get("client_tail_pct")
    if tail is None:
        tail = load.get("tail_pct")
    if tail is not None:
        parts.append(f"{tail:.0f}% of the window was tail")
    return "; ".join(parts)
