"""Phase profile of the speculative cycle from ``/metrics`` deltas, and the break-even arithmetic.

What is read (SGLang 0.5.23, ``srt/observability/metrics_collector.py``; 0.5.17 has the same
families, labels and category/mode values, checked in its wheel). Every series is picked by label
*name*, never by position: scheduler labels are ``model_name``, ``engine_type``, ``tp_rank``,
``pp_rank``, ``moe_ep_rank``, then ``priority`` (priority scheduling), ``dp_rank`` (DP) and any
``--extra-metric-labels``, in whatever order an exporter writes them:

* ``sglang:forward_execution_seconds_total{category=...}``: GPU seconds per forward category,
  timed with CUDA events (only with ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``). Categories are
  forward-mode names: ``eagle_draft`` (draft), ``target_verify`` (verify),
  ``eagle_draft_extend`` / ``draft_extend`` (draft re-extend), ``decode``, ``extend`` /
  ``split_prefill`` (prefill), ``idle`` and others. The scheduler-side labels include
  ``tp_rank`` (and ``pp_rank``/``dp_rank`` in some deployments): TP ranks run the same cycle in
  lock step, so **the rank-0 series is used**; when no series is labelled rank 0, the label set
  with the most GPU time is used.
* ``sglang:cuda_graph_passes_total{mode="decode_cuda_graph"|"decode_none"}``: one count per
  scheduler decode iteration, which is one speculative cycle with speculation on. This is the
  cycle count whatever the batch size. Without it, the count is only known at batch size 1:
  the verify-call delta (speculative) or generation tokens minus requests (plain decode, one
  token per step after each request's prefill token). Otherwise it is None.
* ``sglang:generation_tokens_total``, ``sglang:spec_verify_calls_total`` and
  ``sglang:num_requests_total``: tokenizer-side counters, incremented when a request *finishes*
  (summed over every label set, e.g. ``is_streaming``). Deltas over a window that starts after
  the warm-up has finished and ends after the last measured request has finished count exactly
  the measured requests.

Accept length, three ways (all reported, never substituted for each other):

* ``accept_length_window`` = delta generation tokens / delta verify calls. This counts each
  request's first token, which the prefill produced, so it is SGLang's per-request convention
  (``meta_info.spec_accept_length`` = completion_tokens / spec_verify_ct) and is compared with
  the per-request figure from the benchmark.
* ``accept_length_window_decode`` = (delta generation tokens - delta requests) / delta verify
  calls: tokens per verify cycle, the number the break-even rule needs. It is compared with
  ``/server_info`` ``internal_states[0].avg_spec_accept_length``, which SGLang computes from
  decode cycles only, but cumulatively since start-up (warm-up included) and refreshed every 40
  decode iterations, so it gets a looser tolerance.

Per-cycle times: ``cycle_ms`` = window wall time / cycles; each GPU phase = its seconds / cycles;
``other_ms`` = ``cycle_ms`` minus every timed GPU category (scheduling, sampling, CPU overhead
and any untimed GPU work). ``other_ms`` is reported as measured, even if it comes out negative
(overlapped GPU work, or device-timer lag at the window edges).

Break-even: speculation pays when tokens per cycle exceed ``cycle_ms / baseline_decode_step_ms``
(:func:`break_even`); ``speedup`` = tok/s / baseline tok/s (:func:`speedup`). Because
``cycle_ms`` spreads the whole window (prefills included) over the cycles, at batch 1 and the
same prompts ``accept_length_window_decode > break_even_accept_length`` holds exactly when the
trial beats the baseline's wall time. ``decode_cycle_ms`` (= ``cycle_ms - prefill_ms``) is the
steady-state figure for long outputs; ``break_even(p.decode_cycle_ms, base.decode_cycle_ms)``
gives the break-even without prefill.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from autotune.profile.snapshot import MetricsSnapshot, delta, grouped_deltas, pick_group
from autotune.sglang.metrics import DECODE_PASSES, FORWARD_SECONDS, GEN_TOKENS, NUM_REQUESTS, VERIFY_CALLS

#: forward category -> phase. Unlisted categories count as ``gpu_other``.
PHASE_OF_CATEGORY = {
    "eagle_draft": "draft", "frozen_kv_draft": "draft", "draft": "draft",
    "target_verify": "verify",
    "eagle_draft_extend": "extend", "draft_extend": "extend", "draft_extend_v2": "extend",
    "decode": "decode",
    "extend": "prefill", "split_prefill": "prefill", "mixed": "prefill",
}
PHASES = ("draft", "verify", "extend", "decode", "prefill", "gpu_other")
_DECODE_MODES = ("decode_cuda_graph", "decode_none")


def _rel_diff(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return abs(b - a) / abs(a)


def break_even(cycle_ms: float | None, baseline_decode_step_ms: float | None) -> float | None:
    """Accept length (tokens per cycle) at which speculation only ties plain decoding."""
    if cycle_ms is None or not baseline_decode_step_ms or baseline_decode_step_ms <= 0:
        return None
    return cycle_ms / baseline_decode_step_ms


def speedup(tok_s: float | None, baseline_tok_s: float | None) -> float | None:
    """Throughput relative to the baseline; None when either is unknown."""
    if tok_s is None or not baseline_tok_s or baseline_tok_s <= 0:
        return None
    return tok_s / baseline_tok_s


# --------------------------------------------------------------------------------------------
# Profile
# --------------------------------------------------------------------------------------------

@dataclass
class PhaseProfile:
    """Per-cycle phase times, shares, accept lengths and break-even for one measured window.

    Times are milliseconds per cycle (per decode step without speculation); shares are percent
    of ``cycle_ms``. Every figure that cannot be known is None.
    """

    wall_s: float | None
    speculative: bool | None
    cycles: float | None
    cycles_source: str | None
    cycle_ms: float | None
    decode_cycle_ms: float | None
    draft_ms: float | None
    verify_ms: float | None
    extend_ms: float | None
    decode_ms: float | None
    prefill_ms: float | None
    gpu_other_ms: float | None
    other_ms: float | None
    shares: dict[str, float | None]
    gpu_seconds: dict[str, float]
    device_timer: bool
    delta_generation_tokens: float | None
    delta_verify_calls: float | None
    delta_requests: float | None
    accept_length_window: float | None
    accept_length_window_decode: float | None
    accept_length_meta_info: float | None
    accept_length_server_info: float | None
    accept_rel_diff_meta_info: float | None
    accept_rel_diff_server_info: float | None
    accept_consistent: bool | None
    baseline_decode_step_ms: float | None = None
    break_even_accept_length: float | None = None
    tok_s: float | None = None
    baseline_tok_s: float | None = None
    speedup: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def accept_length(self) -> float | None:
        """Tokens per verify cycle: the decode-only window figure, else SGLang's convention."""
        if self.accept_length_window_decode is not None:
            return self.accept_length_window_decode
        return self.accept_length_window

    @classmethod
    def from_snapshots(cls, before: MetricsSnapshot, after: MetricsSnapshot, *, wall_s: float,
                       max_batch: int | None = None, speculative: bool | None = None,
                       meta_accept_length: float | None = None,
                       draft_forwards: bool = True,
                       baseline_decode_step_ms: float | None = None,
                       tok_s: float | None = None, baseline_tok_s: float | None = None,
                       meta_tolerance: float = 0.02,
                       server_info_tolerance: float = 0.10) -> PhaseProfile:
        """Build the profile from snapshots around the measured window.

        Args:
            before: Snapshot after warm-up, before the first measured request.
            after: Snapshot after the last measured request finished.
            wall_s: Measured window wall time (the benchmark's first start to last end).
            max_batch: Most requests ever in flight (the benchmark's concurrency); 1 enables the
                batch-1 cycle-count fallbacks.
            speculative: Whether the server speculates; None infers it from verify calls.
            meta_accept_length: The benchmark's per-request accept length.
            draft_forwards: Whether the draft model runs forwards of its own in the draft phase.
                With one speculative step it does not (the re-extend yields the only draft token),
                so no draft series is a known zero there rather than a missing one.
            baseline_decode_step_ms: The no-speculation baseline's ``cycle_ms``.
            tok_s: This trial's output tok/s; baseline_tok_s: the baseline's.
            meta_tolerance: Largest relative gap window vs meta_info still called consistent.
            server_info_tolerance: The same for window-decode vs ``/server_info`` (cumulative,
                so looser).
        """
        if not wall_s or wall_s <= 0:
            raise ValueError(f"wall_s must be > 0, got {wall_s!r}")
        notes: list[str] = []
        for snap, which in ((before, "before"), (after, "after")):
            if snap.error:
                notes.append(f"{which}: {snap.error}")
        if before.exposition is None and after.exposition is not None:
            # Counting from zero would put warm-up (and every earlier run) into the window.
            notes.append("no metrics page before the window: every count over it is unknown")
            after = dataclasses.replace(after, exposition=None)

        d_gen = delta(before, after, GEN_TOKENS)
        d_verify = delta(before, after, VERIFY_CALLS)
        d_req = delta(before, after, NUM_REQUESTS)
        if speculative is None and d_verify is not None:
            speculative = d_verify > 0

        gpu, device_timer, group = cls._gpu_seconds(before, after, notes)
        cycles, source = cls._cycles(before, after, group, speculative=speculative,
                                     d_gen=d_gen, d_verify=d_verify, d_req=d_req,
                                     max_batch=max_batch, notes=notes)

        cycle_ms = wall_s * 1e3 / cycles if cycles else None
        per: dict[str, float | None] = {p: None for p in PHASES}
        other_ms = None
        if device_timer and cycles:
            for phase, secs in gpu.items():
                per[phase] = secs * 1e3 / cycles
            if speculative is None:
                notes.append("whether the server speculates is unknown; other_ms unknown")
            else:
                # A phase the mode cannot run is a known zero; one it must run but the device
                # timer did not report is unknown (e.g. an eager draft is not timed). Requests
                # that ran in the window had their prefills there too.
                needed = ((("draft",) if draft_forwards else ()) + ("verify", "extend")
                          if speculative else ("decode",))
                if d_req:
                    needed += ("prefill",)
                missing = [p for p in needed if p not in gpu]
                for p in PHASES:
                    if per[p] is None and p not in missing:
                        per[p] = 0.0
                if missing:
                    notes.append(f"no device-timer series for {', '.join(missing)}; "
                                 "other_ms unknown")
                else:
                    other_ms = cycle_ms - math.fsum(  # type: ignore[operator]
                        v for v in per.values() if v is not None)
        shares: dict[str, float | None] = {}
        for name, v in [*per.items(), ("other", other_ms)]:
            shares[name] = (100.0 * v / cycle_ms) if (v is not None and cycle_ms) else None

        acc_win = (d_gen / d_verify) if (d_gen is not None and d_verify) else None
        acc_dec = ((d_gen - d_req) / d_verify) if (
            d_gen is not None and d_req is not None and d_verify) else None
        acc_srv = after.avg_spec_accept_length()
        rd_meta = _rel_diff(acc_win, meta_accept_length)
        rd_srv = _rel_diff(acc_dec, acc_srv)
        checks = [d <= tol for d, tol in ((rd_meta, meta_tolerance),
                                          (rd_srv, server_info_tolerance)) if d is not None]
        consistent = all(checks) if checks else None

        return cls(
            wall_s=wall_s, speculative=speculative, cycles=cycles, cycles_source=source,
            cycle_ms=cycle_ms, decode_cycle_ms=(
                cycle_ms - per["prefill"] if cycle_ms is not None and per["prefill"] is not None
                else None),
            draft_ms=per["draft"], verify_ms=per["verify"],
            extend_ms=per["extend"], decode_ms=per["decode"], prefill_ms=per["prefill"],
            gpu_other_ms=per["gpu_other"], other_ms=other_ms, shares=shares,
            gpu_seconds=dict(gpu), device_timer=device_timer, delta_generation_tokens=d_gen,
            delta_verify_calls=d_verify, delta_requests=d_req, accept_length_window=acc_win,
            accept_length_window_decode=acc_dec, accept_length_meta_info=meta_accept_length,
            accept_length_server_info=acc_srv, accept_rel_diff_meta_info=rd_meta,
            accept_rel_diff_server_info=rd_srv, accept_consistent=consistent,
            baseline_decode_step_ms=baseline_decode_step_ms,
            break_even_accept_length=break_even(cycle_ms, baseline_decode_step_ms),
            tok_s=tok_s, baseline_tok_s=baseline_tok_s, speedup=speedup(tok_s, baseline_tok_s),
            notes=notes)

    @staticmethod
    def _gpu_seconds(before: MetricsSnapshot, after: MetricsSnapshot,
                     notes: list[str]) -> tuple[dict[str, float], bool, tuple | None]:
        """GPU seconds per phase in the window, whether the device timer is on, the series used."""
        if after.exposition is None or not after.exposition.series(FORWARD_SECONDS):
            notes.append(f"no {FORWARD_SECONDS} (set "
                         "SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 and --enable-metrics); "
                         "phase times unknown")
            return {}, False, None
        groups = grouped_deltas(before.exposition, after.exposition, FORWARD_SECONDS,
                                 "category")
        if groups is None:
            notes.append("forward_execution_seconds_total went down: server restarted")
            return {}, False, None
        group = pick_group(groups)
        phases: dict[str, float] = {}
        for cat, secs in (groups[group] if group is not None else {}).items():
            phase = PHASE_OF_CATEGORY.get(cat, "gpu_other")
            phases[phase] = phases.get(phase, 0.0) + secs
        if group:
            notes.append(f"phase times from series {dict(group)}")
        return phases, True, group

    @staticmethod
    def _cycles(before: MetricsSnapshot, after: MetricsSnapshot, group: tuple | None, *,
                speculative: bool | None, d_gen: float | None, d_verify: float | None,
                d_req: float | None, max_batch: int | None,
                notes: list[str]) -> tuple[float | None, str | None]:
        if after.exposition is not None and after.exposition.series(DECODE_PASSES):
            groups = grouped_deltas(before.exposition, after.exposition, DECODE_PASSES, "mode")
            if groups:
                g = pick_group(groups, prefer=group)
                n = math.fsum(groups[g].get(m, 0.0) for m in _DECODE_MODES)  # type: ignore[index]
                if n > 0:
                    return n, "decode_passes"
        if max_batch == 1:
            if speculative and d_verify:
                return d_verify, "verify_calls"
            if speculative is False and d_gen is not None and d_req is not None \
                    and d_gen - d_req > 0:
                return d_gen - d_req, "generation_tokens"
        notes.append("cycle count unknown: no decode-pass counter and batch size is not 1")
        return None, None

    def to_dict(self) -> dict[str, Any]:
        """Flat, JSON-ready form; None stays None."""
        out: dict[str, Any] = {
            "wall_s": self.wall_s, "speculative": self.speculative, "cycles": self.cycles,
            "cycles_source": self.cycles_source, "cycle_ms": self.cycle_ms,
            "decode_cycle_ms": self.decode_cycle_ms,
            "draft_ms": self.draft_ms, "verify_ms": self.verify_ms, "extend_ms": self.extend_ms,
            "decode_ms": self.decode_ms, "prefill_ms": self.prefill_ms,
            "gpu_other_ms": self.gpu_other_ms, "other_ms": self.other_ms,
        }
        for name, v in self.shares.items():
            out[f"{name}_pct"] = v
        out.update({
            "device_timer": self.device_timer,
            "delta_generation_tokens": self.delta_generation_tokens,
            "delta_verify_calls": self.delta_verify_calls, "delta_requests": self.delta_requests,
            "accept_length": self.accept_length,
            "accept_length_window": self.accept_length_window,
            "accept_length_window_decode": self.accept_length_window_decode,
            "accept_length_meta_info": self.accept_length_meta_info,
            "accept_length_server_info": self.accept_length_server_info,
            "accept_rel_diff_meta_info": self.accept_rel_diff_meta_info,
            "accept_rel_diff_server_info": self.accept_rel_diff_server_info,
            "accept_consistent": self.accept_consistent,
            "baseline_decode_step_ms": self.baseline_decode_step_ms,
            "break_even_accept_length": self.break_even_accept_length,
            "tok_s": self.tok_s, "baseline_tok_s": self.baseline_tok_s,
            "speedup": self.speedup, "gpu_seconds": dict(self.gpu_seconds),
            "notes": list(self.notes),
        })
        return out


__all__ = ["PhaseProfile", "break_even", "speedup"]
