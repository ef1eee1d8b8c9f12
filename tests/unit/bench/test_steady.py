"""The steady interval of a closed loop (autotune.bench.steady), on request records of a known loop."""

from __future__ import annotations

from collections import deque

import pytest

from autotune.bench.records import RequestRecord
from autotune.bench.steady import MIN_WAVES, steady_window


def closed_loop(n: int, concurrency: int, *, cap: int | None = None, tokens: int = 20, step: float = 0.01,
                prefill_steps: int = 5) -> list[RequestRecord]:
    """A server that runs at most ``cap`` requests, each ``prefill_steps`` steps to its first token and
    one token a step after, fed by a client that keeps ``concurrency`` in flight: full, it makes
    ``cap`` tokens a step."""
    cap = cap or concurrency
    records = [RequestRecord(index=i, prompt_id=str(i), start=0.0) for i in range(min(n, concurrency))]
    waiting = deque(records)
    running: list[tuple[RequestRecord, int]] = []  # (record, steps since admitted)
    sent, k = len(records), 0
    while waiting or running:
        while waiting and len(running) < cap:
            running.append((waiting.popleft(), 0))
        k += 1
        now = k * step
        kept = []
        for rec, age in running:
            age += 1
            if age >= prefill_steps:
                made = (rec.chunk_tokens[-1] if rec.chunk_tokens else 0) + 1
                rec.chunk_times.append(now)
                assert rec.chunk_tokens is not None
                rec.chunk_tokens.append(made)
                if made == tokens:
                    rec.end, rec.completion_tokens = now, tokens
                    if sent < n:  # the client sends the next as this one closes
                        nxt = RequestRecord(index=sent, prompt_id=str(sent), start=now)
                        records.append(nxt)
                        waiting.append(nxt)
                        sent += 1
                    continue
            kept.append((rec, age))
        running = kept
    return records


def one_short_wave() -> list[RequestRecord]:
    """One wave of 16 whose first request stops half-way: the tail is most of the window."""
    records = closed_loop(16, 16)
    first = records[0]
    kept = [i for i, t in enumerate(first.chunk_times) if t <= 0.12]
    first.chunk_times = [first.chunk_times[i] for i in kept]
    first.chunk_tokens = [(first.chunk_tokens or [])[i] for i in kept]
    first.end, first.completion_tokens = 0.12, first.chunk_tokens[-1]
    return records


def whole_tok_s(records: list[RequestRecord]) -> float:
    span = max(r.end or 0.0 for r in records) - min(r.start for r in records)
    return sum(r.completion_tokens or 0 for r in records) / span


def test_the_steady_figure_is_the_full_loads_rate_without_ramp_or_tail() -> None:
    records = closed_loop(100, 16, tokens=20, step=0.01)  # 16 tokens a step when full: 1600 tok/s
    steady = steady_window(records, level=16)
    assert steady.usable and steady.reason is None
    # 100 requests at 16: six full waves of 24 steps (4 waiting for prefill, 20 tokens), then 4 alone:
    # the tail is out; the loop sent 16 at once, so there was no ramp-up to leave out.
    assert steady.start == 0.0 and steady.end == pytest.approx(6 * 0.24)
    last_send = max(r.start for r in records)
    assert steady.end >= last_send and steady.end < max(r.end or 0.0 for r in records)
    cycle = 16 * 20 / 0.24  # a slot makes 20 tokens every 24 steps: the full load's rate
    assert steady.tok_s == pytest.approx(cycle)
    assert whole_tok_s(records) < 0.9 * cycle  # the whole window pays for the tail
    assert steady.share is not None and 0.5 < steady.share < 1 and steady.waves is not None
    assert steady.waves is not None and steady.waves >= 4


def test_behind_a_server_cap_the_full_load_is_the_cap() -> None:
    records = closed_loop(120, 16, cap=12)
    at_cap = steady_window(records, level=12)
    assert at_cap.usable
    assert at_cap.tok_s == pytest.approx(12 * 20 / 0.24, rel=0.01)
    # Asked for 16, held to 16 in flight: the client is full until the last sends, the server is not.
    asked = steady_window(records, level=16)
    assert asked.end is not None and at_cap.end is not None and asked.end < at_cap.end


def test_one_wave_is_too_short_and_says_so() -> None:
    records = one_short_wave()
    steady = steady_window(records, level=16)
    assert not steady.usable and steady.reason is not None
    assert f"under {MIN_WAVES:g}" in steady.reason and steady.tok_s is not None


def test_unknowns_give_a_reason_not_a_figure() -> None:
    records = closed_loop(64, 8)
    records[3].error = "boom"
    assert steady_window(records, level=8).reason == "a request failed or did not end: no steady figure"
    records = closed_loop(64, 8)
    records[5].chunk_tokens = None
    none = steady_window(records, level=8)
    assert none.reason == "the server gave no per-chunk token counts" and none.tok_s is None
    assert steady_window(closed_loop(64, 8), level=9).reason == "the client never had 9 requests in flight"
    with pytest.raises(ValueError):
        steady_window(records, level=0)


def test_a_client_that_fills_up_slowly_has_its_ramp_left_out() -> None:
    # The first eight requests sent a step apart: the loop is full only from the eighth send on.
    records = closed_loop(80, 8)
    for i, rec in enumerate(records[:8]):
        shift = 0.01 * i
        rec.start += shift
        rec.chunk_times = [t + shift for t in rec.chunk_times]
        rec.end = (rec.end or 0.0) + shift
    steady = steady_window(records, level=8)
    assert steady.start == pytest.approx(0.07)
