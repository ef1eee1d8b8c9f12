"""How full a run kept its request slots, from its records alone.

A closed-loop server's throughput depends on how many requests it holds, so a client that is slow to
send the next request after one ends (or slow to notice the end) reads a lower tok/s than one that
is quick, on the same server. Two figures say how quick a client was:

- **mean in flight**: the time-averaged number of requests in flight over the run's window (Little's
  law: the sum of every request's send-to-close time over the window's length). ``sglang.bench_serving``
  prints the same figure as ``concurrency`` (its requests' e2e latencies over its duration).
- **dispatch gaps**: at concurrency ``C``, the ``k``-th request to close frees a slot and the
  ``(C + k)``-th request to be sent fills it; the gap is the time between the two. While at most ``C``
  requests are in flight the ``(C + k)``-th send cannot come before the ``k``-th close, so no gap is
  negative, and the sum of the gaps is the slot time the client left idle between requests whichever
  worker sent what.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.bench.records import RequestRecord, percentile


def mean_in_flight(records: Sequence[RequestRecord]) -> float | None:
    """Time-averaged requests in flight over the window (first send to last close).

    None without records, when a record's close is unknown, or for a window of no length.
    """
    if not records or any(r.end is None for r in records):
        return None
    w0 = min(r.start for r in records)
    w1 = max(r.end for r in records if r.end is not None)
    if w1 <= w0:
        return None
    return sum(r.end - r.start for r in records if r.end is not None) / (w1 - w0)


def dispatch_gaps(records: Sequence[RequestRecord], concurrency: int) -> list[float] | None:
    """Seconds from each freed slot (a close) to the send that filled it, at most ``concurrency``
    in flight; empty when no request waited for a slot. None when a close is unknown.

    Raises:
        ValueError: ``concurrency`` below 1, or records that held more than ``concurrency`` requests
            in flight (so they are not a closed loop at that concurrency).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if any(r.end is None for r in records):
        return None
    starts = sorted(r.start for r in records)
    ends = sorted(r.end for r in records if r.end is not None)
    gaps = [starts[concurrency + k] - ends[k] for k in range(len(starts) - concurrency)]
    if gaps and min(gaps) < 0:
        raise ValueError(f"the records held more than {concurrency} requests in flight: not a closed "
                         f"loop at concurrency {concurrency}")
    return gaps


@dataclass(frozen=True)
class Occupancy:
    """A run's occupancy figures (seconds; None when unknown).

    Attributes:
        concurrency: The cap the run kept.
        mean_in_flight: Time-averaged requests in flight over the window.
        gap_p50_s, gap_p90_s, gap_max_s: Dispatch-gap percentiles (None when no request waited).
        idle_slot_share: Sum of the gaps over ``concurrency`` x the window: the share of slot time
            left idle between a close and the next send.
    """

    concurrency: int
    mean_in_flight: float | None
    gap_p50_s: float | None
    gap_p90_s: float | None
    gap_max_s: float | None
    idle_slot_share: float | None

    @classmethod
    def of(cls, records: Sequence[RequestRecord], concurrency: int) -> Occupancy:
        """The figures of a closed-loop run's records at ``concurrency``."""
        gaps = dispatch_gaps(records, concurrency)
        ends = [r.end for r in records if r.end is not None]
        window = (max(ends) - min(r.start for r in records)) if records and len(ends) == len(records) else None
        idle = (sum(gaps) / (concurrency * window)) if gaps is not None and window else None
        return cls(concurrency=concurrency, mean_in_flight=mean_in_flight(records),
                   gap_p50_s=percentile(gaps, 50) if gaps else None,
                   gap_p90_s=percentile(gaps, 90) if gaps else None,
                   gap_max_s=max(gaps) if gaps else None, idle_slot_share=idle)
