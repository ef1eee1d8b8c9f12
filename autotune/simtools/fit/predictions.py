"""What a fitted profile predicts for measured configs, the errors against the goals, the report.

Predictions use the emulator's own model (:class:`~autotune.sim.model.PerformanceModel`, the code
the emulator server and the evaluator run) and are laid out as a measured window is: every phase
in ms per decode cycle, where the cycle time spreads the whole window (prefill and per-request
overhead included) over the cycles, and "other" is what the timed GPU phases leave.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.sim.config import ModelConfig
from autotune.sim.model import PerformanceModel
from autotune.sim.profile import Profile
from autotune.simtools.fit.data import MeasuredConfig

SHARES = ("draft", "verify", "extend", "other")
GOAL_TOK_S_PCT = 10.0
GOAL_SHARE_POINTS = 5.0


def model_for(profile: Profile, obs: MeasuredConfig) -> PerformanceModel:
    """The emulator's model of one measured launch (its flags and environment)."""
    args = dict(obs.server_args)
    for key in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
        value = {"speculative_num_steps": obs.steps, "speculative_eagle_topk": obs.topk,
                 "speculative_num_draft_tokens": obs.draft_tokens}[key]
        if value is not None:
            args[key] = value
    if obs.steps is not None and not args.get("speculative_algorithm"):
        args["speculative_algorithm"] = "EAGLE3"
    for flag in ("disable_overlap_schedule", "disable_custom_all_reduce"):
        if isinstance(args.get(flag), str):
            args[flag] = args[flag].lower() in ("1", "true", "yes")
    return PerformanceModel(profile, ModelConfig.from_server_args(args, obs.env))


def predict_window(profile: Profile, obs: MeasuredConfig, *, input_len: int) -> dict[str, Any]:
    """What the model expects a trial of ``obs``'s config to measure, laid out as a window.

    Returns:
        ``tok_s``, ``cycles_per_request``, ``accept_window_decode`` (None for plain decode) and
        ``phases`` (per-cycle ms of draft, verify, extend, decode, prefill, gpu_other, other, cycle)
        with ``shares`` (percent of the cycle).
    """
    model = model_for(profile, obs)
    out_len = max(round(obs.output_len), 1)
    exp = model.expected(batch=1, input_len=input_len, output_len=out_len)
    cycles = exp.cycles or 1.0
    if exp.busy_ms is None:  # expected() always sets it
        raise ValueError("the model's expectation has no busy time")
    c = exp.cycle
    prefill = model.prefill_ms(input_len) / cycles
    cycle_ms = exp.busy_ms / cycles
    phases = {"draft": c.draft_ms, "verify": c.verify_ms, "extend": c.extend_ms,
              "decode": c.decode_ms, "prefill": prefill, "gpu_other": 0.0}
    phases["other"] = cycle_ms - math.fsum(phases.values())
    phases["cycle"] = cycle_ms
    return {"tok_s": exp.output_tok_s, "cycles_per_request": cycles,
            "accept_window_decode": (out_len - 1) / cycles if exp.accept_length else None,
            "phases": phases, "shares": shares_of(phases)}


def shares_of(phases: Mapping[str, float]) -> dict[str, float]:
    """Percent of the cycle per phase (prefill included, to show where the rest went)."""
    return {k: 100.0 * phases[k] / phases["cycle"] for k in (*SHARES, "decode", "prefill")}


def compare(profile: Profile, rows: Sequence[MeasuredConfig], *, input_len: int) -> list[dict[str, Any]]:
    """Per config: measured vs predicted tok/s (relative error, %) and shares (error, points)."""
    out = []
    for o in rows:
        pred = predict_window(profile, o, input_len=input_len)
        measured = dict(o.phases)
        measured["other"] += o.unmodelled_ms  # timed work the model has no phase for
        meas_shares = shares_of(measured)
        spec = not o.is_baseline
        names = SHARES if spec else ("decode", "other")
        share_err = {k: pred["shares"][k] - meas_shares[k] for k in names}
        out.append({
            "id": o.id, "source": o.source, "baseline": o.is_baseline,
            "tok_s": o.tok_s, "tok_s_pred": pred["tok_s"],
            "tok_s_err_pct": 100.0 * (pred["tok_s"] - o.tok_s) / o.tok_s,
            "tok_s_spread_pct": (100.0 * o.tok_s_spread / o.tok_s
                                 if o.tok_s_spread is not None else None),
            # What the phase window itself implies; tok/s is the median over repeats.
            "tok_s_window": o.output_len * 1e3 / (o.phases["cycle"] * o.cycles_per_request),
            "cycle_ms": o.phases["cycle"], "cycle_ms_pred": pred["phases"]["cycle"],
            "phases_ms": {k: measured[k] for k in (*SHARES, "decode", "prefill")},
            "phases_ms_pred": {k: pred["phases"][k] for k in (*SHARES, "decode", "prefill")},
            "shares": {k: meas_shares[k] for k in names},
            "shares_pred": {k: pred["shares"][k] for k in names},
            "share_err_points": share_err,
            "accept_window_decode": o.accept_window_decode,
            "accept_window_decode_pred": pred["accept_window_decode"],
        })
    return out


def goals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Max and median absolute errors of the predicted configs against the goals, PASS/FAIL."""
    tok = [abs(r["tok_s_err_pct"]) for r in rows]
    pts = [abs(v) for r in rows for v in r["share_err_points"].values()]
    worst_share = max(((abs(v), r["id"], k) for r in rows for k, v in r["share_err_points"].items()),
                      default=None)
    return {
        "tok_s": {"goal_pct": GOAL_TOK_S_PCT, "max_abs_pct": max(tok), "median_abs_pct":
                  statistics.median(tok), "worst": max(rows, key=lambda r: abs(r["tok_s_err_pct"]))["id"],
                  "pass": max(tok) <= GOAL_TOK_S_PCT},
        "shares": {"goal_points": GOAL_SHARE_POINTS, "max_abs_points": max(pts),
                   "median_abs_points": statistics.median(pts),
                   "worst": f"{worst_share[1]} {worst_share[2]}" if worst_share else None,
                   "pass": max(pts) <= GOAL_SHARE_POINTS},
    }


def _f(v: Any, fmt: str = ".2f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def markdown(report: Mapping[str, Any]) -> str:
    """The report as a markdown page: goals, per-config table, fitted keys, notes."""
    g, sp = report["goals"], report["split"]
    tok, sh = g["tok_s"], g["shares"]
    lines = [
        f"# Sim-to-real accuracy: profile `{report['profile']['name']}`", "",
        (f"Fitted to {len(sp['fit'])} configs ({', '.join(sp['fit'])}); predicted "
         f"{len(sp['predict'])} ({', '.join(sp['predict'])}). Split: {sp['how']}."), "",
        "| goal | max error | median error | worst | verdict |", "|---|---|---|---|---|",
        (f"| tok/s within {tok['goal_pct']:g}% | {tok['max_abs_pct']:.1f}% | "
         f"{tok['median_abs_pct']:.1f}% | {tok['worst']} | {_verdict(tok['pass'])} |"),
        (f"| shares within {sh['goal_points']:g} points | {sh['max_abs_points']:.1f} | "
         f"{sh['median_abs_points']:.1f} | {sh['worst']} | {_verdict(sh['pass'])} |"), ""]
    header = ("| config | tok/s meas | tok/s pred | err % | spread % | window tok/s | "
              "cycle ms meas / pred | draft % | verify % | extend % | other % | accept meas / pred |")
    for title, key in (("Predicted half", "predicted"), ("Fit half (in-sample)", "fitted")):
        lines += [f"## {title}", "", header, "|---" * 12 + "|"]
        for r in report[key]:
            cells = [f"{r['shares'][k]:.1f} / {r['shares_pred'][k]:.1f}" if k in r["shares"]
                     else "-" for k in SHARES]
            row = [r["id"], f"{r['tok_s']:.1f}", f"{r['tok_s_pred']:.1f}",
                   f"{r['tok_s_err_pct']:+.1f}", _f(r["tok_s_spread_pct"], ".1f"),
                   f"{r['tok_s_window']:.1f}", f"{r['cycle_ms']:.2f} / {r['cycle_ms_pred']:.2f}",
                   *cells, f"{_f(r['accept_window_decode'])} / {_f(r['accept_window_decode_pred'])}"]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines += [("Shares are measured / predicted percent of the cycle (wall time of the window over "
               "its decode cycles); window tok/s is what the phase window implies (tok/s is the "
               "median over repeats, the window is one of them)."), "",
              "## Fitted keys", "", "| key | value | fit-half RMS ms |", "|---|---|---|"]
    for pf in report["fits"]:
        for k, v in pf["values"].items():
            lines.append(f"| {k} | {v:.4g} | {pf['rms_ms']:.3f} ({pf['phase']}) |")
    for k, v in report["other_keys"].items():
        lines.append(f"| {k} | {_f(v, '.4g')} | - |")
    lines += ["", "## What the model cannot capture", ""]
    lines += [f"- {n}" for n in report["cannot_capture"]] or ["- nothing found"]
    if report["excluded"]:
        lines += ["", "## Excluded measurements", ""]
        lines += [f"- `{e['source']}`: {e['reason']}" for e in report["excluded"]]
    return "\n".join(lines) + "\n"
