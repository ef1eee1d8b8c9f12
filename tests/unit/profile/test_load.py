"""The load a server ran (autotune.profile.load): gauges, the cap, the client's timeline, the flag."""

from __future__ import annotations

import pytest

from autotune.profile.load import (
    LoadSample,
    client_tail_share,
    gauges,
    load_note,
    load_window,
    server_cap,
    trial_load,
)
from autotune.profile.prom import parse_exposition
from autotune.sglang import metrics

LABELS = 'model_name="m",engine_type="unified",tp_rank="{tp}",pp_rank="0",moe_ep_rank="0"'


def page(running: float, queued: float, *, tp_ranks: int = 1) -> str:
    lines = [f"# TYPE {metrics.NUM_RUNNING_REQS} gauge", f"# TYPE {metrics.NUM_QUEUE_REQS} gauge"]
    for tp in range(tp_ranks):
        # Only rank 0 is the scheduler's own figure; another rank's must not be added to it.
        lines.append(f"{metrics.NUM_RUNNING_REQS}{{{LABELS.format(tp=tp)}}} {running * (1 + tp)}")
        lines.append(f"{metrics.NUM_QUEUE_REQS}{{{LABELS.format(tp=tp)}}} {queued * (1 + tp)}")
    return "\n".join(lines) + "\n"


def test_gauges_read_rank_zero_and_a_missing_gauge_is_unknown() -> None:
    sample = gauges(parse_exposition(page(48, 16, tp_ranks=2)), 1.0)
    assert (sample.running, sample.queued) == (48, 16)
    empty = gauges(parse_exposition("# TYPE other gauge\nother 1\n"), 2.0)
    assert empty.running is None and empty.queued is None


def test_server_cap_prefers_the_schedulers_effective_cap() -> None:
    assert server_cap({"max_running_requests": 48}) == 48
    # After memory sizing the scheduler may hold fewer; each data-parallel rank holds its own.
    assert server_cap({"max_running_requests": 48, "dp_size": 2,
                       "internal_states": [{"effective_max_running_requests_per_dp": 40}]}) == 80
    assert server_cap({}) is None and server_cap(None) is None


def test_client_tail_share_is_the_time_below_the_asked_concurrency() -> None:
    # Two requests asked: both in flight over [0, 6], then one alone until 10: 4 of 10 s below 2.
    assert client_tail_share([(0.0, 6.0), (0.0, 10.0)], 2) == pytest.approx(0.4)
    # A closed loop of 2 that refills at once is never below until the last request drains.
    spans = [(0.0, 2.0), (0.0, 3.0), (2.0, 5.0), (3.0, 5.0)]
    assert client_tail_share(spans, 2) == pytest.approx(0.0)
    assert client_tail_share([], 2) is None


def test_a_window_above_the_cap_is_capped_and_one_below_it_is_not() -> None:
    full = [LoadSample(t=i, running=48, queued=16) for i in range(8)]
    drain = [LoadSample(t=8 + i, running=16, queued=0) for i in range(2)]
    capped = load_window(full + drain, [(0.0, 10.0)] * 64, asked=64, cap=48)
    assert capped.capped and capped.sustainable == 48
    assert capped.running_max == 48 and capped.queued_max == 16 and capped.queued_p50 == 16
    assert capped.server_tail_share == pytest.approx(0.2)  # 2 of 10 samples ran fewer than 48
    under = load_window([LoadSample(t=0, running=16, queued=0)], [(0.0, 1.0)] * 16, asked=16, cap=48)
    assert not under.capped and under.server_tail_share == 0.0


def test_the_note_s_tail_is_the_client_s_time_below_what_the_server_could_run() -> None:
    # Behind a cap of 48 the client keeps 64 in flight until the last requests drain: below the
    # ask only while fewer than 64 remain, below the cap only once fewer than 48 do.
    spans = [(0.0, 8.0)] * 16 + [(0.0, 9.0)] * 40 + [(0.0, 10.0)] * 8
    samples = [LoadSample(t=i, running=48 if i < 8 else 30, queued=16 if i < 8 else 0) for i in range(10)]
    # The gauge also reads below 48 at two instants of the full stretch (an admission gap).
    samples[2] = LoadSample(t=2, running=45, queued=16)
    samples[5] = LoadSample(t=5, running=46, queued=16)
    window = load_window(samples, spans, asked=64, cap=48)
    # 64 in flight until 8 s, 48 until 9, then 8: below the cap for the last second only.
    assert window.client_tail_share == pytest.approx(0.1)
    assert window.server_tail_share == pytest.approx(0.4)  # 2 samples of the drain, 2 of the gaps
    load = trial_load([window])
    assert load is not None and load["note"].endswith("; 10% of the window was tail")
    # Without a cap the threshold is the ask; an open loop (no ask) has no client tail.
    assert load_window([], spans, asked=64, cap=None).client_tail_share == pytest.approx(0.2)
    assert load_window([], spans, asked=None, cap=48).client_tail_share is None


def test_samples_outside_the_requests_are_not_the_windows() -> None:
    # The sampler starts before the first request is sent: that idle 0 is not what the server ran.
    samples = [LoadSample(t=-0.05, running=0, queued=0), LoadSample(t=0.5, running=48, queued=16),
               LoadSample(t=2.5, running=0, queued=0)]
    window = load_window(samples, [(0.0, 2.0)] * 64, asked=64, cap=48)
    assert window.samples == 1 and window.running_max == 48 and window.server_tail_share == 0.0


def test_a_queue_seen_now_and_then_is_not_a_cap_but_a_standing_one_is() -> None:
    # Without a cap from /server_info: an arrival waits for the next forward on any server.
    blips = [LoadSample(t=i, running=8, queued=1 if i == 3 else 0) for i in range(10)]
    assert not load_window(blips, [], asked=8, cap=None).capped
    standing = [LoadSample(t=i, running=6, queued=2) for i in range(10)]
    assert load_window(standing, [], asked=8, cap=None).capped
    # Unknown gauges flag nothing.
    assert not load_window([], [], asked=8, cap=None).capped


def test_trial_load_counts_capped_windows_and_writes_the_line() -> None:
    # 64 in flight for 6 s (48 running, 16 queued), then 16 alone for 4 s: the tail is 40%.
    spans = [(0.0, 6.0)] * 48 + [(0.0, 10.0)] * 16
    windows = [load_window([LoadSample(t=i, running=48 if i < 6 else 16, queued=16 if i < 6 else 0)
                            for i in range(10)], spans, asked=64, cap=48) for _ in range(3)]
    load = trial_load(windows)
    assert load is not None
    assert (load["ran"], load["queued"], load["cap"], load["capped_windows"]) == (48, 16, 48, 3)
    assert load["tail_pct"] == pytest.approx(40.0) and load["client_tail_pct"] == pytest.approx(40.0)
    assert load["note"] == "ran 48 of 64; 16 queued; server cap 48; 40% of the window was tail"
    uncapped = trial_load([load_window([LoadSample(t=0, running=8, queued=0)], [], asked=8, cap=48)])
    assert uncapped is not None and not uncapped["capped"] and uncapped["note"] is None
    assert load_note(uncapped) is None and trial_load([]) is None
