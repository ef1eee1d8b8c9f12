"""Fit an emulator profile to real trial summaries, predict held-out configs, report the error.

``python -m autotune.simtools.fit --measurements DIR_OR_FILES... --base-profile NAME_OR_PATH
--name NAME (--fit-half even|odd | --fit ID,ID...) --out-profile PATH --report PATH...``

Reads ``summary_json`` files (one per measured config, the plain baseline among them), fits the
timing keys of a dense single-GPU profile to the fit half (see :mod:`autotune.simtools.fit.solve`),
writes the profile, then predicts the other half with the emulator's own model and reports the
error on tok/s and on the phase shares against the goals (10% and 5 points). ``--list`` only
prints the config ids and the excluded files. Documented in ``docs/sim-profiles.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune import command_line as cli
from autotune.errors import AutotuneError, ConfigError
from autotune.sim.profile import Profile, load_profile
from autotune.simtools.fit import solve as fs
from autotune.simtools.fit.data import Dataset, MeasuredConfig, load_measurements, split
from autotune.simtools.fit.predictions import compare, goals, markdown

_FIELDS = {f for f in Profile.__dataclass_fields__}


@dataclass
class FitResult:
    """A fitted profile (as a dict and as loaded), and the report of its accuracy."""

    profile_data: dict[str, Any]
    profile: Profile
    report: dict[str, Any]


def fit_profile(ds: Dataset, *, base: Profile, name: str, half: str | None = None,
                fit_ids: Sequence[str] | None = None, input_len: int = 64,
                overrides: dict[str, Any] | None = None,
                profile_path: str | Path | None = None) -> FitResult:
    """Fit ``base``'s timing keys to one half of ``ds`` and predict the other half.

    Args:
        ds: Loaded measurements (:func:`autotune.simtools.fit.data.load_measurements`).
        base: Profile whose other keys (hardware, acceptance, TP) the result keeps.
        name: Name of the fitted profile.
        half: ``even`` or ``odd`` (see :func:`autotune.simtools.fit.data.split`); or give ``fit_ids``.
        input_len: Prompt tokens per request assumed for prefill (fit and prediction use the same
            value, so the measured prefill is matched whatever it is).
        overrides: Profile keys to set as given (``num_layers``, ``gpu_memory_gib``...).
        profile_path: Where the profile will be written, for the report.

    Raises:
        ConfigError: no baseline, bad split, or an override that is not a profile key.
    """
    overrides = dict(overrides or {})
    bad = sorted(set(overrides) - _FIELDS)
    if bad:
        raise ConfigError(f"unknown profile key(s) {bad}", field="--set")
    fit, pred, split_notes = split(ds, half=half, fit_ids=fit_ids)
    backend_factor = _backend_factor(base)
    target = fs.fit_target(fit, backend_factor)
    draft = fs.fit_draft(fit)
    extend = fs.fit_extend(fit)
    other_ms = fs.plain_other_ms([o for o in fit if o.is_baseline])
    overlap = float(overrides.get("overlap_hidden_ms", base.overlap_hidden_ms))
    other = fs.fit_other(fit, other_ms=other_ms, overlap_hidden_ms=overlap)
    values: dict[str, Any] = {"fixed_ms": 0.0, "per_token_ms": 0.0, "verify_fixed_ms": 0.0,
                              "draft_first_step_ms": 0.0, "extend_per_token_ms": 0.0,
                              "spec_other_per_step_ms": 0.0, "spec_other_per_token_ms": 0.0,
                              "other_ms": other_ms}
    for pf in (target, draft, extend, other):
        values.update(pf.values)
    values["draft_skip_steps"] = int(values["draft_skip_steps"])
    spec_fit = [o for o in fit if not o.is_baseline]
    prefill_src = spec_fit or [o for o in fit if o.is_baseline]
    per_req = fs.prefill_per_request(prefill_src) / (1.02 if spec_fit else 1.0)
    values["prefill_fixed_ms"] = max(per_req - base.prefill_ms_per_token * input_len, 0.0)
    cv = fs.noise_cv(ds.observations)
    if cv is not None:
        values["noise_cv"] = cv
    desc = (f"{name}: fitted by autotune.simtools.fit.command to {len(fit)} measured configs "
            f"({', '.join(o.id for o in fit)}) on top of {base.name}")
    data = fs.profile_dict(base, values, name=name, description=desc, overrides=overrides)
    profile = _validated(data)
    fitted_rows = compare(profile, fit, input_len=input_len)
    predicted_rows = compare(profile, pred, input_len=input_len)
    fits = [target, draft, extend, other]
    report = {
        "profile": {"name": name, "base": base.name, "path": str(profile_path) if profile_path else None},
        "split": {"fit": [o.id for o in fit], "predict": [o.id for o in pred],
                  "how": (f"--fit {','.join(fit_ids)}" if fit_ids is not None else
                          f"--fit-half {half}: chains and trees each sorted by (steps, topk, draft "
                          f"tokens, forced accept) and alternated; baselines always fitted"),
                  "notes": split_notes},
        "goals": goals(predicted_rows),
        "predicted": predicted_rows, "fitted": fitted_rows,
        "fits": [{"phase": pf.phase, "values": pf.values, "rms_ms": pf.rms,
                  "residuals_ms": pf.residuals, "dropped": pf.dropped, "note": pf.note}
                 for pf in fits],
        "other_keys": {"other_ms": other_ms, "prefill_fixed_ms": values["prefill_fixed_ms"],
                       "noise_cv": cv, "input_len_assumed": input_len},
        "cannot_capture": cannot_capture(ds, fit, pred, fits, fitted_rows + predicted_rows,
                                         profile=profile),
        "excluded": [{"source": e.source, "reason": e.reason} for e in ds.excluded],
    }
    return FitResult(profile_data=data, profile=profile, report=report)


def _backend_factor(base: Profile) -> Callable[[MeasuredConfig], float]:
    def factor(o: MeasuredConfig) -> float:
        backend = o.server_args.get("attention_backend") or base.default_attention_backend
        f = base.attention_backends.get(str(backend))
        if f is None:
            raise ConfigError(f"{o.source}: attention backend {backend!r} is not in base profile "
                              f"{base.name}'s attention_backends {sorted(base.attention_backends)}")
        return float(f)
    return factor


def _validated(data: dict[str, Any]) -> Profile:
    """Load the dict exactly as the emulator would load the YAML file."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=True) as fh:
        fh.write(yaml.safe_dump(data, sort_keys=False))
        fh.flush()
        return load_profile(fh.name)


def cannot_capture(ds: Dataset, fit: Sequence[MeasuredConfig], pred: Sequence[MeasuredConfig],
                   fits: Sequence[fs.PhaseFit], rows: Sequence[dict[str, Any]], *,
                   profile: Profile) -> list[str]:
    """Data-driven notes on what the fitted model leaves out (residual patterns, noise, scope)."""
    notes: list[str] = []
    obs = list(fit) + list(pred)
    spreads = [100 * o.tok_s_spread / o.tok_s for o in obs if o.tok_s_spread is not None]
    if spreads:
        notes.append(f"Run-to-run noise: tok/s half-range over repeats is {statistics.median(spreads):.1f}% "
                     f"median, {max(spreads):.1f}% max; the model predicts a mean, so tok/s errors "
                     f"below that are not meaningful.")
    gaps = [100 * (o.output_len / (o.phases["cycle"] * o.cycles_per_request) * 1e3 - o.tok_s) / o.tok_s
            for o in obs]
    if max(abs(g) for g in gaps) > 2:
        worst = max(zip(gaps, obs, strict=True), key=lambda t: abs(t[0]))
        notes.append(f"tok/s (median of repeats) and the phase window (the median repeat's; with "
                     f"an even number of repeats the upper middle one) disagree by up to "
                     f"{worst[0]:+.1f}% ({worst[1].id}): tok/s errors include this. An odd number "
                     f"of repeats makes them the same run.")
    base = [o for o in obs if o.is_baseline]
    spec = [o for o in obs if not o.is_baseline]
    if base and spec:
        dec = statistics.mean(o.phases["decode"] for o in base)
        ver = min(o.phases["verify"] for o in spec)
        if ver < dec:
            notes.append(f"Verify ({ver:.3f} ms at best) is cheaper than a plain decode step "
                         f"({dec:.3f} ms); the model's verify is a decode forward plus extras, so "
                         f"it overstates verify by up to {dec - ver:.3f} ms.")
        pb, ps = fs.prefill_per_request(base), fs.prefill_per_request(spec)
        if pb > 0 and abs(ps / pb - 1.02) > 0.2:
            notes.append(f"Prefill per request: {pb:.2f} ms plain vs {ps:.2f} ms with the draft "
                         f"({ps / pb:.2f}x); the model adds 2% for the draft, so the baseline's "
                         f"prefill is off by {abs(ps / 1.02 - pb):.2f} ms a request.")
        ob = statistics.mean(o.phases["other"] for o in base)
        os_ = statistics.mean(o.phases["other"] for o in spec)
        notes.append(f"CPU 'other' is {ob:.2f} ms per plain step but {os_:.2f} ms per speculative "
                     f"cycle ({100 * statistics.mean(o.phases['other'] / o.phases['cycle'] for o in spec):.0f}% "
                     f"of it): modelled as spec_other_ms {profile.spec_other_ms:.3g} + "
                     f"{profile.spec_other_per_step_ms:.3g}/step + "
                     f"{profile.spec_other_per_token_ms:.3g}/verified token, with no dependence on "
                     f"overlap scheduling beyond the overlap_hidden_ms flag.")
    for pf in fits:
        if pf.dropped:
            notes.append(f"{pf.phase}: left out {'; '.join(pf.dropped)}.")
        if pf.note:
            notes.append(pf.note + ".")
    pr = [r for r in rows if not r["baseline"]]
    other_res = [(r["phases_ms_pred"]["other"] - r["phases_ms"]["other"], r) for r in pr]
    accs = [o.accept_window_decode for o in spec]
    if len(other_res) >= 4 and None not in accs:
        by_id = {o.id: o for o in spec}
        # None is not in accs (checked above): the filter only tells the type checker.
        xs = [x for _, r in other_res if (x := by_id[r["id"]].accept_window_decode) is not None]
        ys = [e for e, _ in other_res]
        if len(set(xs)) > 1 and max(ys) - min(ys) > 1e-9:
            corr = statistics.correlation(xs, ys)
            slope = statistics.linear_regression(xs, ys).slope
            if abs(corr) > 0.6:
                notes.append(f"Other-time residual follows the accept length (r = {corr:.2f}, "
                             f"{-slope:+.3f} ms per extra token a cycle): per-token CPU work "
                             f"(output processing, streaming) the model has no key for.")
    for phase in ("draft", "verify", "extend", "other"):
        errs = [(abs(r["phases_ms_pred"][phase] - r["phases_ms"][phase]), r["id"]) for r in pr
                if r["id"] in {o.id for o in pred}]
        if errs:
            e, rid = max(errs)
            if e > 0.05:
                notes.append(f"Largest {phase} error on the predicted half: {e:.3f} ms ({rid}).")
    ids: dict[str, list[MeasuredConfig]] = {}
    for o in obs:
        ids.setdefault(o.id.split("#")[0], []).append(o)
    for key, group in ids.items():
        if len(group) > 1:
            tok = [o.tok_s for o in group]
            notes.append(f"{key} measured {len(group)} times: tok/s {min(tok):.1f}-{max(tok):.1f} "
                         f"({100 * (max(tok) - min(tok)) / statistics.mean(tok):.1f}% apart), "
                         f"variation the model does not have.")
    starts = [o.startup_s for o in obs if o.startup_s is not None]
    if starts:
        notes.append(f"Start-up took {min(starts):.0f}-{max(starts):.0f} s (weight load, CUDA-graph "
                     f"capture); the emulator waits startup_s = {profile.startup_s:g} s, a scaled-down "
                     f"stand-in, not a prediction.")
    if spec and all(o.forced_acc is not None for o in spec):
        notes.append("Acceptance was forced (SGLANG_SIMULATE_ACC_LEN) in every config, so the "
                     "profile's acceptance keys are the base profile's, not fitted.")
    notes.append("Fitted at batch 1 on one GPU with one attention backend: batch growth, TP "
                 "all-reduce and MoE keys keep the base profile's values and are not checked.")
    return notes


def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"expected KEY=VALUE, got {item!r}", field="--set")
        k, v = item.split("=", 1)
        out[k.strip()] = yaml.safe_load(v)
    return out


def write_report(report: dict[str, Any], paths: Sequence[str]) -> list[Path]:
    """Write the report as JSON (``.json``), markdown (``.md``), or both (any other name)."""
    written = []
    for raw in paths:
        p = Path(raw)
        targets = [p] if p.suffix in (".json", ".md") else [p.with_suffix(".json"), p.with_suffix(".md")]
        for t in targets:
            t.parent.mkdir(parents=True, exist_ok=True)
            t.write_text(json.dumps(report, indent=1, default=str) + "\n" if t.suffix == ".json"
                         else markdown(report))
            written.append(t)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.simtools.fit",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--measurements", nargs="+", required=True,
                        help="trial summary JSON files, or directories of them")
    parser.add_argument("--base-profile", default="llama-3.1-8b-eagle3-h100",
                        help="profile whose other keys the fit keeps (default: %(default)s)")
    parser.add_argument("--name", default="h200-tiny-llama-dummy", help="fitted profile name")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--fit-half", choices=("even", "odd"), help="deterministic split")
    which.add_argument("--fit", help="comma-separated config ids to fit (see --list)")
    which.add_argument("--list", action="store_true", help="print config ids and exclusions only")
    parser.add_argument("--out-profile", help="where to write the fitted profile YAML")
    parser.add_argument("--report", nargs="+", default=[], help="report path(s): .json, .md, or both")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="profile keys to set (num_layers=8 hidden_size=2048 ...)")
    parser.add_argument("--input-len", type=int, default=64,
                        help="prompt tokens a request is assumed to have (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        ds = load_measurements(args.measurements)
        if args.list:
            for o in ds.observations:
                print(f"{o.id:16s} {o.tok_s:8.1f} tok/s  {o.source}")
            for e in ds.excluded:
                print(f"excluded         {e.source}: {e.reason}")
            return 0
        if not args.out_profile:
            raise ConfigError("--out-profile is required (where to write the fitted profile)")
        fit_ids = [s.strip() for s in args.fit.split(",") if s.strip()] if args.fit else None
        res = fit_profile(ds, base=load_profile(args.base_profile), name=args.name,
                          half=args.fit_half or ("even" if fit_ids is None else None),
                          fit_ids=fit_ids, input_len=args.input_len,
                          overrides=_parse_set(args.set), profile_path=args.out_profile)
        out = Path(args.out_profile)
        out.parent.mkdir(parents=True, exist_ok=True)
        header = (f"# {res.profile_data['description']}\n# Written by python -m autotune.simtools.fit; "
                  f"accuracy report: {', '.join(args.report) or 'not written'}.\n")
        out.write_text(header + yaml.safe_dump(res.profile_data, sort_keys=False))
        load_profile(out)
        written = write_report(res.report, args.report)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    g = res.report["goals"]
    for r in res.report["predicted"]:
        errs = " ".join(f"{k} {v:+.1f}" for k, v in r["share_err_points"].items())
        print(f"{r['id']:16s} tok/s {r['tok_s']:8.1f} pred {r['tok_s_pred']:8.1f} "
              f"({r['tok_s_err_pct']:+.1f}%)  share err pts: {errs}")
    print(f"tok/s: max {g['tok_s']['max_abs_pct']:.1f}%, median {g['tok_s']['median_abs_pct']:.1f}% "
          f"(goal {g['tok_s']['goal_pct']:g}%): {'PASS' if g['tok_s']['pass'] else 'FAIL'}")
    print(f"shares: max {g['shares']['max_abs_points']:.1f} pts, median "
          f"{g['shares']['median_abs_points']:.1f} pts (goal {g['shares']['goal_points']:g}): "
          f"{'PASS' if g['shares']['pass'] else 'FAIL'}")
    print(f"profile: {out}" + (f"; report: {', '.join(map(str, written))}" if written else ""))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run_main(main))
