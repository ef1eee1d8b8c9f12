"""Phase profile arithmetic on snapshots exposed by a real prometheus_client registry."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from autotune.errors import BenchError
from autotune.profile.phases import PhaseProfile, break_even, speedup
from autotune.profile.prom import parse_exposition
from autotune.profile.snapshot import MetricsSnapshot, scrape, scrape_sync


class FakeSGLang:
    """The SGLang metric families the profile reads, on a private registry."""

    def __init__(self, *, device_timer: bool = True, decode_passes: bool = True,
                 spec: bool = True, ranks: tuple[str, ...] = ("0",)) -> None:
        self.reg = CollectorRegistry()
        self.ranks = ranks
        sched = ["model_name", "tp_rank"]
        self.fwd = Counter("sglang:forward_execution_seconds", "GPU busy time",
                           sched + ["category"], registry=self.reg) if device_timer else None
        self.passes = Counter("sglang:cuda_graph_passes", "passes", sched + ["mode"],
                              registry=self.reg) if decode_passes else None
        self.gen = Counter("sglang:generation_tokens", "gen", ["model_name", "is_streaming"],
                           registry=self.reg)
        self.reqs = Counter("sglang:num_requests", "reqs", ["model_name", "is_streaming"],
                            registry=self.reg)
        self.verify = Counter("sglang:spec_verify_calls", "verify", ["model_name"],
                              registry=self.reg) if spec else None
        Gauge("sglang:spec_accept_length", "gauge", ["model_name"], registry=self.reg)
        Histogram("sglang:e2e_request_latency_seconds", "h", ["model_name"],
                  registry=self.reg).labels("m").observe(0.3)
        self.avg_accept: float | None = None

    def gpu(self, category: str, seconds: float, rank: str = "0") -> None:
        self.fwd.labels("m", rank, category).inc(seconds)

    def run(self, *, requests: int, tokens: int, cycles: int, verify: int | None = None,
            streaming_split: bool = True) -> None:
        half = requests // 2 if streaming_split else 0
        self.reqs.labels("m", "true").inc(requests - half)
        self.reqs.labels("m", "false").inc(half)
        self.gen.labels("m", "true").inc(tokens - 10 * half)
        self.gen.labels("m", "false").inc(10 * half)
        if self.verify is not None and verify:
            self.verify.labels("m").inc(verify)
        if self.passes is not None:
            for rank in self.ranks:
                self.passes.labels("m", rank, "decode_cuda_graph").inc(cycles - 1)
                self.passes.labels("m", rank, "decode_none").inc(1)
                self.passes.labels("m", rank, "prefill_cuda_graph").inc(requests)

    def snapshot(self, t: float = 0.0) -> MetricsSnapshot:
        info = None
        if self.avg_accept is not None:
            info = {"internal_states": [{"avg_spec_accept_length": self.avg_accept}]}
        return MetricsSnapshot(t=t, exposition=parse_exposition(generate_latest(self.reg).decode()),
                               server_info=info)


# ---------------------------------------------------------------------------------------------
# Prometheus text parsing
# ---------------------------------------------------------------------------------------------


def test_parser_agrees_with_prometheus_client():
    reg = CollectorRegistry()
    c = Counter("sglang:forward_execution_seconds", "x", ["category", "note"], registry=reg)
    c.labels("target_verify", 'quote " and \\ back\nslash').inc(1.25)
    c.labels("eagle_draft", "").inc(0.5)
    Gauge("sglang:gen_throughput", "g", registry=reg).set(float("nan"))
    Histogram("lat", "h", registry=reg).observe(0.2)
    text = generate_latest(reg).decode()
    ours = parse_exposition(text)
    theirs = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for fam in text_string_to_metric_families(text) for s in fam.samples}
    mine = {(s.name, tuple(sorted(s.labels.items()))): s.value
            for series in ours.samples.values() for s in series}
    assert mine.keys() == theirs.keys()
    for k, v in theirs.items():
        assert (math.isnan(v) and math.isnan(mine[k])) or mine[k] == v
    # prometheus_client 0.2x declares the family as ``..._total``; older ones without the suffix
    assert "counter" in (ours.types.get("sglang:forward_execution_seconds"),
                         ours.types.get("sglang:forward_execution_seconds_total"))
    assert ours.declared("sglang:forward_execution_seconds_total")
    labels = [s.labels for s in ours.series("sglang:forward_execution_seconds_total")]
    assert {"category": "target_verify", "note": 'quote " and \\ back\nslash'} in labels


def test_parser_reports_the_bad_line():
    with pytest.raises(ValueError, match="line 3"):
        parse_exposition('# HELP a b\na 1\nb{x="1" 2\n')
    with pytest.raises(ValueError, match="line 1.*value"):
        parse_exposition("a one\n")
    expo = parse_exposition('# TYPE fam counter\nfam_total 3\na{x="1",} 2 1700000000000\n# EOF\n')
    assert expo.declared("fam_total") and not expo.declared("other_total")
    assert expo.series("a")[0].value == 2 and expo.series("a")[0].labels == {"x": "1"}


# ---------------------------------------------------------------------------------------------
# speculative profile
# ---------------------------------------------------------------------------------------------


def test_speculative_profile_arithmetic():
    srv = FakeSGLang(ranks=("0", "1"))
    srv.gpu("target_verify", 5.0)  # warm-up, before the window
    srv.run(requests=2, tokens=50, cycles=20, verify=20)
    before = srv.snapshot()
    # window: 1000 cycles, 10 requests, 2100 tokens; rank 1 is slower and must be ignored
    for cat, secs in (("eagle_draft", 2.0), ("target_verify", 26.0),
                      ("eagle_draft_extend", 1.0), ("extend", 0.5), ("idle", 0.25)):
        srv.gpu(cat, secs, "0")
        srv.gpu(cat, secs * 1.5, "1")
    srv.run(requests=10, tokens=2100, cycles=1000, verify=1000)
    srv.avg_accept = 2.05
    after = srv.snapshot()

    prof = PhaseProfile.from_snapshots(before, after, wall_s=31.75, meta_accept_length=2.1,
                                       baseline_decode_step_ms=11.1, tok_s=66.1,
                                       baseline_tok_s=90.0)
    assert prof.speculative is True and prof.device_timer
    assert prof.cycles == 1000 and prof.cycles_source == "decode_passes"
    assert prof.cycle_ms == pytest.approx(31.75)
    assert prof.draft_ms == pytest.approx(2.0) and prof.verify_ms == pytest.approx(26.0)
    assert prof.extend_ms == pytest.approx(1.0) and prof.prefill_ms == pytest.approx(0.5)
    assert prof.gpu_other_ms == pytest.approx(0.25) and prof.decode_ms == 0.0
    assert prof.other_ms == pytest.approx(31.75 - 29.75)
    assert prof.decode_cycle_ms == pytest.approx(31.75 - 0.5)
    assert sum(v for v in prof.shares.values()) == pytest.approx(100.0)
    assert prof.shares["verify"] == pytest.approx(100 * 26 / 31.75)
    assert prof.delta_generation_tokens == 2100 and prof.delta_requests == 10
    assert prof.delta_verify_calls == 1000
    assert prof.accept_length_window == pytest.approx(2.1)
    assert prof.accept_length_window_decode == pytest.approx(2.09)
    assert prof.accept_length == pytest.approx(2.09)
    assert prof.accept_length_server_info == 2.05
    assert prof.accept_rel_diff_meta_info == pytest.approx(0.0)
    assert prof.accept_rel_diff_server_info == pytest.approx(0.04 / 2.09)
    assert prof.accept_consistent is True
    assert prof.break_even_accept_length == pytest.approx(31.75 / 11.1)
    assert prof.speedup == pytest.approx(66.1 / 90.0)
    d = prof.to_dict()
    assert d["verify_pct"] == pytest.approx(prof.shares["verify"]) and d["other_pct"] > 0
    assert d["gpu_seconds"]["verify"] == pytest.approx(26.0)


def test_inconsistent_accept_lengths_are_flagged():
    srv = FakeSGLang()
    before = srv.snapshot()
    srv.gpu("eagle_draft", 1.0)
    srv.gpu("target_verify", 1.0)
    srv.gpu("eagle_draft_extend", 1.0)
    srv.run(requests=4, tokens=404, cycles=100, verify=100)
    prof = PhaseProfile.from_snapshots(before, srv.snapshot(), wall_s=4.0,
                                       meta_accept_length=4.04 * 1.1)
    assert prof.accept_rel_diff_meta_info == pytest.approx(0.1)
    assert prof.accept_consistent is False
    assert prof.accept_length_server_info is None and prof.accept_rel_diff_server_info is None


def test_untimed_draft_is_unknown_not_zero():
    srv = FakeSGLang()
    before = srv.snapshot()
    srv.gpu("target_verify", 3.0)
    srv.gpu("eagle_draft_extend", 0.2)
    srv.run(requests=2, tokens=300, cycles=100, verify=100)
    prof = PhaseProfile.from_snapshots(before, srv.snapshot(), wall_s=4.0)
    assert prof.verify_ms == pytest.approx(30.0)
    assert prof.draft_ms is None and prof.other_ms is None and prof.shares["other"] is None
    assert prof.cycle_ms == pytest.approx(40.0)
    assert any("draft" in n for n in prof.notes)


# ---------------------------------------------------------------------------------------------
# plain decode and missing data
# ---------------------------------------------------------------------------------------------


def test_plain_decode_at_batch_one_counts_steps_from_tokens():
    srv = FakeSGLang(decode_passes=False, spec=False)
    before = srv.snapshot()
    srv.gpu("decode", 9.0)
    srv.gpu("extend", 0.4)
    srv.run(requests=4, tokens=1004, cycles=0)
    after = srv.snapshot()
    prof = PhaseProfile.from_snapshots(before, after, wall_s=11.1, max_batch=1,
                                       speculative=False)
    assert prof.cycles == 1000 and prof.cycles_source == "generation_tokens"
    assert prof.cycle_ms == pytest.approx(11.1) and prof.decode_ms == pytest.approx(9.0)
    assert prof.draft_ms == 0.0 and prof.verify_ms == 0.0
    assert prof.other_ms == pytest.approx(11.1 - 9.4)
    assert prof.accept_length_window is None and prof.accept_length is None
    assert prof.accept_consistent is None
    # with a larger batch the same counters cannot give the step count
    unknown = PhaseProfile.from_snapshots(before, after, wall_s=11.1, max_batch=8,
                                          speculative=False, baseline_decode_step_ms=11.1)
    assert unknown.cycles is None and unknown.cycle_ms is None and unknown.decode_ms is None
    assert unknown.break_even_accept_length is None


def test_speculative_at_batch_one_counts_cycles_from_verify_calls():
    srv = FakeSGLang(decode_passes=False)
    before = srv.snapshot()
    srv.gpu("eagle_draft", 0.5)
    srv.gpu("target_verify", 2.5)
    srv.gpu("eagle_draft_extend", 0.25)
    srv.gpu("extend", 0.05)  # the 3 requests' prefills
    srv.run(requests=3, tokens=303, cycles=0, verify=100)
    prof = PhaseProfile.from_snapshots(before, srv.snapshot(), wall_s=3.5, max_batch=1)
    assert prof.speculative is True and prof.cycles_source == "verify_calls"
    assert prof.cycle_ms == pytest.approx(35.0) and prof.other_ms == pytest.approx(2.0)


def test_without_device_timer_only_cycle_time_is_known():
    srv = FakeSGLang(device_timer=False)
    before = srv.snapshot()
    srv.run(requests=2, tokens=202, cycles=100, verify=100)
    prof = PhaseProfile.from_snapshots(before, srv.snapshot(), wall_s=2.0)
    assert prof.cycle_ms == pytest.approx(20.0) and not prof.device_timer
    for v in (prof.draft_ms, prof.verify_ms, prof.extend_ms, prof.other_ms, prof.prefill_ms,
              prof.decode_cycle_ms):
        assert v is None
    assert all(v is None for v in prof.shares.values())
    assert any("SGLANG_ENABLE_METRICS_DEVICE_TIMER" in n for n in prof.notes)
    assert prof.accept_length_window == pytest.approx(2.02)


def test_a_failed_before_scrape_is_unknown_not_counted_from_zero():
    srv = FakeSGLang()
    srv.gpu("target_verify", 3.0)  # warm-up: must not leak into the window
    srv.run(requests=2, tokens=300, cycles=100, verify=100)
    failed = MetricsSnapshot(t=0.0, exposition=None, error="/metrics: connection refused")
    srv.gpu("eagle_draft", 1.0)
    srv.gpu("target_verify", 3.0)
    srv.gpu("eagle_draft_extend", 0.2)
    srv.gpu("extend", 0.1)
    srv.run(requests=2, tokens=300, cycles=100, verify=100)
    prof = PhaseProfile.from_snapshots(failed, srv.snapshot(), wall_s=4.0)
    assert prof.delta_generation_tokens is None and prof.delta_verify_calls is None
    assert prof.delta_requests is None and prof.cycles is None
    assert prof.verify_ms is None and prof.accept_length is None
    assert any("connection refused" in n for n in prof.notes)


def test_a_missing_prefill_series_is_unknown_when_requests_ran():
    def window(*, prefill: bool) -> PhaseProfile:
        srv = FakeSGLang()
        before = srv.snapshot()
        srv.gpu("eagle_draft", 1.0)
        srv.gpu("target_verify", 3.0)
        srv.gpu("eagle_draft_extend", 0.2)
        if prefill:
            srv.gpu("extend", 0.1)
        srv.run(requests=2, tokens=300, cycles=100, verify=100)
        return PhaseProfile.from_snapshots(before, srv.snapshot(), wall_s=5.0)

    timed = window(prefill=True)
    assert timed.prefill_ms == pytest.approx(1.0) and timed.other_ms is not None
    untimed = window(prefill=False)
    assert untimed.prefill_ms is None and untimed.other_ms is None
    assert untimed.shares["prefill"] is None and untimed.shares["other"] is None
    assert any("prefill" in n for n in untimed.notes)
    assert untimed.decode_ms == 0.0  # a speculating server runs no plain decode: a known zero
    # A repeat's breakdown keeps the profile's rules: the missing prefill is unknown, not 0 s.
    from autotune.trial.result import repeat_breakdown

    bench = SimpleNamespace(output_tok_s=60.0, duration_s=5.0, ttft_ms={50: 12.0})
    (row,), (known,) = (repeat_breakdown([bench], [p]) for p in (untimed, timed))
    assert row["prefill_s"] is None and row["host_s"] is None and row["cycle_gpu_s"] == pytest.approx(4.2)
    assert known["prefill_s"] == pytest.approx(0.1) and known["cycle_gpu_s"] == pytest.approx(4.2)
    assert known["prefill_s"] + known["cycle_gpu_s"] + known["host_s"] == pytest.approx(5.0)


def test_counter_reset_means_unknown():
    srv = FakeSGLang()
    srv.run(requests=5, tokens=500, cycles=100, verify=100)
    srv.gpu("target_verify", 3.0)
    before = srv.snapshot()
    fresh = FakeSGLang()  # the server restarted: counters start again from zero
    fresh.run(requests=1, tokens=10, cycles=5, verify=5)
    fresh.gpu("target_verify", 0.1)
    prof = PhaseProfile.from_snapshots(before, fresh.snapshot(), wall_s=1.0)
    assert prof.delta_generation_tokens is None and prof.delta_verify_calls is None
    assert prof.verify_ms is None and prof.accept_length is None


def test_no_metrics_endpoint_gives_all_none():
    empty = MetricsSnapshot(t=0.0, exposition=None, error="/metrics: HTTP 404")
    prof = PhaseProfile.from_snapshots(empty, empty, wall_s=1.0, baseline_decode_step_ms=10,
                                       tok_s=None, baseline_tok_s=80)
    d = prof.to_dict()
    for key in ("cycle_ms", "draft_ms", "verify_ms", "other_ms", "accept_length",
                "break_even_accept_length", "speedup", "speculative", "delta_requests"):
        assert d[key] is None, key
    assert any("404" in n for n in prof.notes)
    with pytest.raises(ValueError):
        PhaseProfile.from_snapshots(empty, empty, wall_s=0)


def test_rank_labels_absent_picks_busiest_series():
    reg = CollectorRegistry()
    c = Counter("sglang:forward_execution_seconds", "x", ["model_name", "category"],
                registry=reg)
    p = Counter("sglang:cuda_graph_passes", "x", ["model_name", "mode"], registry=reg)
    before = MetricsSnapshot(0, parse_exposition(generate_latest(reg).decode()))
    c.labels("big", "decode").inc(8.0)
    c.labels("small", "decode").inc(1.0)
    p.labels("big", "decode_cuda_graph").inc(1000)
    p.labels("small", "decode_cuda_graph").inc(10)
    after = MetricsSnapshot(1, parse_exposition(generate_latest(reg).decode()))
    prof = PhaseProfile.from_snapshots(before, after, wall_s=10.0, speculative=False)
    assert prof.cycles == 1000 and prof.decode_ms == pytest.approx(8.0)


def test_break_even_and_speedup_helpers():
    assert break_even(31.75, 11.1) == pytest.approx(2.86, abs=0.01)
    assert break_even(None, 11.1) is None and break_even(30.0, None) is None
    assert break_even(30.0, 0) is None
    assert speedup(120.0, 100.0) == pytest.approx(1.2)
    assert speedup(None, 100.0) is None and speedup(100.0, None) is None


# ---------------------------------------------------------------------------------------------
# scraping
# ---------------------------------------------------------------------------------------------


def test_scrape_async_and_sync_over_transport():
    srv = FakeSGLang()
    srv.run(requests=1, tokens=10, cycles=5, verify=5)
    page = generate_latest(srv.reg).decode()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=page)
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"internal_states": [
                {"avg_spec_accept_length": 1.9}], "version": "0.5.23"})
        return httpx.Response(404)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await scrape(client, "http://srv/")

    snap = asyncio.run(go())
    assert snap.error is None and snap.avg_spec_accept_length() == 1.9
    assert snap.counter_total("sglang:generation_tokens_total") == 10
    assert snap.counter_total("sglang:spec_verify_calls_total") == 5
    assert snap.counter_total("sglang:not_a_metric_total") is None
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        snap2 = scrape_sync(client, "http://srv")
    assert snap2.counter_total("sglang:num_requests_total") == 1


def test_scrape_without_metrics_and_with_a_broken_page():
    def no_metrics(request):
        return httpx.Response(404, text="not found")

    with httpx.Client(transport=httpx.MockTransport(no_metrics)) as client:
        snap = scrape_sync(client, "http://srv")
    assert snap.exposition is None and snap.server_info is None
    assert "--enable-metrics" in snap.error
    assert snap.counter_total("sglang:generation_tokens_total") is None

    def broken(request):
        return httpx.Response(200, text='sglang:x{a="1" 2\n')

    with httpx.Client(transport=httpx.MockTransport(broken)) as client:
        with pytest.raises(BenchError, match="line 1"):
            scrape_sync(client, "http://srv", server_info=False)


def test_declared_counter_without_series_is_a_known_zero():
    srv = FakeSGLang()  # spec_verify_calls declared, never incremented
    snap = srv.snapshot()
    assert snap.counter_total("sglang:spec_verify_calls_total") == 0.0


def test_one_step_eagle_has_no_draft_series_and_that_is_a_known_zero():
    """SGLang runs no draft forward at one step (the re-extend yields the draft token), so its
    device timer has no eagle_draft series: draft is 0 and other is known. With more steps the
    same missing series means the draft was not timed: both stay unknown."""
    srv = FakeSGLang()
    before = srv.snapshot()
    srv.gpu("target_verify", 0.8)
    srv.gpu("eagle_draft_extend", 0.16)
    srv.gpu("extend", 0.04)  # the 2 requests' prefills
    srv.run(requests=2, tokens=1002, cycles=1000, verify=1000)
    after = srv.snapshot()
    one = PhaseProfile.from_snapshots(before, after, wall_s=3.0, max_batch=1, speculative=True,
                                      draft_forwards=False)
    assert one.draft_ms == 0.0
    assert one.other_ms == pytest.approx(3.0 - (0.8 + 0.16 + 0.04) * 1e3 / 1000, rel=1e-6)
    many = PhaseProfile.from_snapshots(before, after, wall_s=3.0, max_batch=1, speculative=True)
    assert many.draft_ms is None and many.other_ms is None
