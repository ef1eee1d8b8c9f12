"""Output tok/s over a closed loop's steady state: the window without its ramp-up and its tail.

At concurrency above 1 a repeat's whole window (first send to last end) holds a ramp, while the
first requests prefill together, and a tail, once the prompts have run out and fewer requests are in
flight than asked (issue 34: 49% of an H200 window at concurrency 64 was tail). Both vary from
repeat to repeat with the order requests end in, and neither is the load the run was meant to
measure. :func:`steady_window` takes the client's per-request timestamps and counts the output tokens
that arrived while the load was full:

* it starts when the client's in-flight count first reaches ``level`` (before: the ramp-up);
* it ends when the in-flight count falls below ``level`` for the last time (after: the tail);
* ``level`` is the concurrency asked, or the server's running-request cap when that is lower (a
  closed loop of 64 on a server capped at 48 is full while 48 or more are in flight).

autotune's closed loop sends its first ``concurrency`` requests at once, so its ramp-up is empty by
this rule: the first wave's prefill is work of the first wave's requests, as every later wave's
prefill is of its own, and an interval from the first send to a request's end holds whole request
lifetimes. Starting at the first tokens instead would leave out one prefill a slot and read high
by about the prefill's share of a wave over the waves counted (4% at 2.6 waves on the emulator).

The interval is usable when it spans at least :data:`MIN_WAVES` waves (a wave: the median request's
send-to-end time), so each part of a request's life, prefill, decode and its end, is inside it in
its steady proportion. The choice between this figure and the whole window is
:func:`autotune.trial.window.objective_rates`'s.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.bench.records import RequestRecord, in_flight_steps

#: The fewest waves (median request lifetimes) a steady interval must span to be used.
MIN_WAVES = 1.0


@dataclass(frozen=True)
class SteadyWindow:
    """One repeat's steady interval and its output tok/s.

    Attributes:
        level: The in-flight count the interval held (``min(asked, server cap)``).
        start, end: The interval on the run's monotonic clock; None when there is none.
        tok_s: Output tokens that arrived in it over its length; None when unknown.
        share: Its length over the whole window's; None when unknown.
        waves: Its length over the median request's send-to-end time; None when unknown.
        reason: Why it cannot speak for the repeat (none, too short, no per-chunk token counts);
            None when it can.
    """

    level: int
    start: float | None = None
    end: float | None = None
    tok_s: float | None = None
    share: float | None = None
    waves: float | None = None
    reason: str | None = None

    @property
    def usable(self) -> bool:
        """Whether the steady figure can speak for the repeat."""
        return self.reason is None and self.tok_s is not None


def _full_interval(records: Sequence[RequestRecord], level: int) -> tuple[float | None, float | None]:
    """When the client first had ``level`` in flight, and when it last fell below it."""
    steps = in_flight_steps([r.start for r in records], [r.end for r in records if r.end is not None])
    before, first, last = 0, None, None
    for t, inflight in steps:
        if before < level <= inflight and first is None:
            first = t
        if inflight < level <= before:
            last = t
        before = inflight
    return first, last


def _tokens_between(record: RequestRecord, a: float, b: float) -> int:
    """Output tokens of ``record`` whose chunks arrived in ``(a, b]``, from its cumulative counts."""
    got, prev = 0, 0
    for t, count in zip(record.chunk_times, record.chunk_tokens or (), strict=False):
        if a < t <= b:
            got += count - prev
        prev = count
    return got


def steady_window(records: Sequence[RequestRecord], *, level: int) -> SteadyWindow:
    """The steady interval of one closed-loop repeat at ``level`` in flight (module docstring).

    Args:
        records: Every request of the repeat.
        level: The in-flight count that is a full load: ``min(asked concurrency, server cap)``.

    Raises:
        ValueError: ``level`` below 1.
    """
    if level < 1:
        raise ValueError(f"level must be >= 1, got {level}")
    done = [r for r in records if r.ok and r.end is not None]
    if not done or len(done) < len(records):
        return SteadyWindow(level, reason="a request failed or did not end: no steady figure")
    if any(not r.chunk_tokens for r in done):
        return SteadyWindow(level, reason="the server gave no per-chunk token counts")
    window = max(r.end for r in done if r.end is not None) - min(r.start for r in done)
    start, tail = _full_interval(done, level)
    if start is None or tail is None or not tail > start:
        return SteadyWindow(level, reason=f"the client never had {level} requests in flight")
    span = tail - start
    wave = statistics.median((r.end or r.start) - r.start for r in done)
    waves = span / wave if wave > 0 else None
    tokens = sum(_tokens_between(r, start, tail) for r in done)
    steady = SteadyWindow(level, start=start, end=tail, tok_s=tokens / span,
                          share=span / window if window > 0 else None, waves=waves)
    if waves is None or waves < MIN_WAVES:
        shown = "?" if waves is None else f"{waves:.2f}"
        return SteadyWindow(**{**steady.__dict__, "reason": f"the steady interval spans {shown} waves, "
                                                            f"under {MIN_WAVES:g}"})
    return steady
