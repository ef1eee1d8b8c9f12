"""Fit an emulator profile to real trial summaries, predict held-out configs, report the error.

Reads ``summary_json`` files (one per measured config, the plain baseline among them), fits the
timing keys of a dense single-GPU profile to the fit half (see :mod:`autotune.simtools.fit.solve`),
writes the profile, then predicts the other half with the emulator's own model and reports the
error on tok/s and on the phase shares against the goals (10% and 5 points). The command is
``python -m autotune.simtools.fit`` (:mod:`autotune.cli.fit`); documented in ``docs/sim-profiles.md``.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import ConfigError
from autotune.sim.profile import Profile, load_profile
from autotune.simtools.fit import solve as fs
from autotune.simtools.fit.data import Dataset, MeasuredConfig, split
from autotune.simtools.fit.predictions import compare, goals, markdown

_FIELDS = {f for f in Profile.__dataclass_fields__}


@dataclass
class FitResult:
    """A fitted profile (as a dict and as loaded), and the report of its accuracy."""

    profile_data: dict[str, Any]
    profile: Profile
    report: dict[str, Any]


def fit_profile(ds: Dataset, *, base: Profile | str, name: str, half: str | None = None,
                fit_ids: Sequence[str] | None = None, input_len: int = 64,
                overrides: dict[str, Any] | None = None,
                profile_path: str | Path | None = None) -> FitResult:
    """Fit ``base``'s timing keys to one half of ``ds`` and predict the other half.

    Args:
        ds: Loaded measurements (:func:`autotune.simtools.fit.data.load_measurements`).
        base: Profile whose other keys (hardware, acceptance, TP) the result keeps, or its name
            or YAML path.
        name: Name of the fitted profile.
        half: ``even`` or ``odd`` (see :func:`autotune.simtools.fit.data.split`); or give ``fit_ids``.
        input_len: Prompt tokens per request assumed for prefill (fit and prediction use the same
            value, so the measured prefill is matched whatever it is).
        overrides: Profile keys to set as given (``num_layers``, ``gpu_memory_gib``...).
        profile_path: Where the profile will be written, for the report.

    Raises:
        ConfigError: no baseline, bad split, or an override that is not a profile key.
    """
    if isinstance(base, str):
        base = load_profile(base)
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


def write_profile(res: FitResult, path: str | Path, *, reports: Sequence[str]) -> Path:
    """Write the fitted profile's YAML to ``path`` (its folder made), with a header naming the
    reports, and load it back as the emulator would.

    Raises:
        ConfigError: The written file does not load as a profile.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# {res.profile_data['description']}\n# Written by python -m autotune.simtools.fit; "
              f"accuracy report: {', '.join(reports) or 'not written'}.\n")
    out.write_text(header + yaml.safe_dump(res.profile_data, sort_keys=False))
    load_profile(out)
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


if __name__ == "__main__":
    import functools

    from autotune import command_line as cli
    from autotune.cli.fit import main

    sys.exit(cli.run_main(functools.partial(main, prog="python -m autotune.simtools.fit.command")))
