"""Least-squares fit of an emulator profile's timing keys to measured per-cycle phases.

Every phase of the model is linear in its profile keys at batch 1 on one GPU, so each phase is
fitted on its own, by non-negative least squares over the fit half (numpy only):

- decode and verify share the target forward: ``decode = dense``; ``verify = dense +
  per_token * (N - 1) + verify_fixed [+ verify_tree * N for top-k > 1]``;
- draft: ``draft_first_step + (steps - skip) * (draft_step + draft_topk * (topk - 1))`` times the
  model's small top-k factor, with ``skip`` (0 or 1) whichever fits better;
- re-extend: ``extend + extend_per_token * steps``;
- other: plain decode's ``other_ms`` from the baseline; per cycle ``spec_other [+ per_step *
  steps] [+ per_token * N]``, a term kept only when the data pin it down and it pays for itself;
- prefill: ``prefill_fixed_ms`` so the modelled prefill of a request matches the measured one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.sim.profile import Profile
from autotune.simtools.fit.data import MeasuredConfig

# A term must cut the RMS residual by this fraction to be kept (guards against fitting noise).
_MIN_GAIN = 0.15
# Half-range of n repeats -> standard deviation (2 / d2 of the range, for n = 2..5).
_HALF_RANGE_TO_SD = {2: 2 / 1.128, 3: 2 / 1.693, 4: 2 / 2.059, 5: 2 / 2.326}


@dataclass
class PhaseFit:
    """One phase's fit: the keys, their values, and the residuals over the fit half (ms)."""

    phase: str
    values: dict[str, float]
    residuals: dict[str, float]
    dropped: list[str] = field(default_factory=list)
    note: str | None = None

    @property
    def rms(self) -> float:
        r = list(self.residuals.values())
        return math.sqrt(sum(x * x for x in r) / len(r)) if r else 0.0


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of columns: the best of every active set."""
    n = a.shape[1]
    best, best_sse = np.zeros(n), float(b @ b)
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sub = a[:, cols]
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.any(x < -1e-12):
                continue
            sse = float(np.sum((sub @ x - b) ** 2))
            if sse < best_sse - 1e-15:
                best = np.zeros(n)
                best[list(cols)] = np.maximum(x, 0.0)
                best_sse = sse
    return best


Feature = Callable[[MeasuredConfig], float]


def _solve(phase: str, rows: Sequence[MeasuredConfig], target: Feature,
           required: dict[str, Feature], optional: dict[str, Feature]) -> PhaseFit:
    """Fit ``required`` keys, then add each ``optional`` key only if it is identifiable and pays."""
    y = np.array([target(o) for o in rows])
    names = list(required)

    def run(keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
        cols = {**required, **optional}
        a = np.array([[cols[k](o) for k in keys] for o in rows]).reshape(len(rows), len(keys))
        x = nnls(a, y)
        return x, a @ x - y

    x, res = run(names)
    dropped: list[str] = []
    for key in optional:
        trial = names + [key]
        a = np.array([[{**required, **optional}[k](o) for k in trial] for o in rows])
        identifiable = len(rows) > len(trial) and np.linalg.matrix_rank(a) == len(trial)
        if not identifiable:
            dropped.append(f"{key} (not identifiable from the fit half)")
            continue
        x2, res2 = run(trial)
        rms, rms2 = float(np.sqrt(np.mean(res ** 2))), float(np.sqrt(np.mean(res2 ** 2)))
        if x2[-1] > 0 and rms2 < rms * (1 - _MIN_GAIN):
            names, x, res = trial, x2, res2
        else:
            dropped.append(f"{key} (cuts the fit-half RMS by {100 * (1 - rms2 / rms) if rms else 0:.0f}%,"
                           f" keeps 0)")
    return PhaseFit(phase=phase, values={k: float(v) for k, v in zip(names, x, strict=True)},
                    residuals={o.id: float(r) for o, r in zip(rows, res, strict=True)}, dropped=dropped)


def _topk_factor(o: MeasuredConfig) -> float:
    return 1 + 0.02 * ((o.topk or 1) - 1)  # the model's per-step growth with top-k at batch 1


def fit_target(fit: Sequence[MeasuredConfig], attn: Callable[[MeasuredConfig], float]) -> PhaseFit:
    """dense_ms (per unit attention factor), per_token_ms, verify_fixed_ms, verify_tree_ms."""
    rows = list(fit)
    spec = [o for o in rows if not o.is_baseline]

    def target(o: MeasuredConfig) -> float:
        return o.phases["decode"] if o.is_baseline else o.phases["verify"]

    optional: dict[str, Feature] = {
        "per_token_ms": lambda o: 0.0 if o.is_baseline else float(o.spec_draft_tokens - 1),
        "verify_fixed_ms": lambda o: 0.0 if o.is_baseline else 1.0,
    }
    if any(o.is_tree for o in spec):
        optional["verify_tree_ms"] = lambda o: float(o.spec_draft_tokens) if o.is_tree else 0.0
    return _solve("target", rows, target, {"dense_ms": attn}, optional)


def fit_draft(fit: Sequence[MeasuredConfig]) -> PhaseFit:
    """draft_step_ms, draft_first_step_ms, draft_topk_ms and draft_skip_steps (0 or 1)."""
    rows = [o for o in fit if not o.is_baseline]
    best: PhaseFit | None = None
    for skip in (0, 1):
        def fwd(o: MeasuredConfig, skip: int = skip) -> float:
            return float(max(o.spec_steps - skip, 0))

        def first(o: MeasuredConfig, f: Feature = fwd) -> float:
            return 1.0 if f(o) > 0 else 0.0

        def topk(o: MeasuredConfig, f: Feature = fwd) -> float:
            return f(o) * ((o.topk or 1) - 1) * _topk_factor(o)

        def step(o: MeasuredConfig, f: Feature = fwd) -> float:
            return f(o) * _topk_factor(o)

        optional: dict[str, Feature] = {"draft_first_step_ms": first}
        if any(o.is_tree for o in rows):
            optional["draft_topk_ms"] = topk
        pf = _solve("draft", rows, lambda o: o.phases["draft"], {"draft_step_ms": step}, optional)
        pf.values["draft_skip_steps"] = float(skip)
        if best is None or pf.rms < best.rms * 0.9:
            best = pf
    assert best is not None
    if best.values["draft_skip_steps"]:
        best.note = ("draft time follows steps - 1 forwards (the first draft token comes from the "
                     "re-extend's logits): draft_skip_steps 1")
    return best


def fit_extend(fit: Sequence[MeasuredConfig]) -> PhaseFit:
    """extend_ms and extend_per_token_ms (per extra re-extended token, steps + 1 of them)."""
    rows = [o for o in fit if not o.is_baseline]
    return _solve("extend", rows, lambda o: o.phases["extend"], {"extend_ms": lambda o: 1.0},
                  {"extend_per_token_ms": lambda o: float(o.spec_steps)})


def plain_other_ms(base: Sequence[MeasuredConfig]) -> float:
    """Plain decode's ``other_ms``: the model also charges it once per request, so unfold that."""
    vals = [(o.phases["other"] + o.unmodelled_ms) / (1 + 1 / o.cycles_per_request)
            for o in base]
    return max(sum(vals) / len(vals), 0.0)


def fit_other(fit: Sequence[MeasuredConfig], *, other_ms: float, overlap_hidden_ms: float) -> PhaseFit:
    """spec_other_ms (+ per step, + per verified token) from the speculative windows' other time.

    The model's window "other" of a speculative config is its per-cycle other plus the per-request
    ``other_ms`` spread over the request's cycles; untimed GPU work counts as other too.
    """
    rows = [o for o in fit if not o.is_baseline]

    def target(o: MeasuredConfig) -> float:
        y = o.phases["other"] + o.unmodelled_ms - other_ms / o.cycles_per_request
        if o.server_args.get("disable_overlap_schedule") in (True, "true", "True"):
            y -= overlap_hidden_ms
        return y

    optional: dict[str, Feature] = {"spec_other_per_step_ms": lambda o: float(o.spec_steps)}
    if any(o.is_tree for o in rows):
        optional["spec_other_per_token_ms"] = lambda o: float(o.spec_draft_tokens)
    return _solve("other", rows, target, {"spec_other_ms": lambda o: 1.0}, optional)


def prefill_per_request(obs: Sequence[MeasuredConfig]) -> float:
    """Mean measured prefill GPU ms of one request."""
    return sum(o.phases["prefill"] * o.cycles_per_request for o in obs) / len(obs)


def noise_cv(obs: Sequence[MeasuredConfig]) -> float | None:
    """Run-to-run spread of tok/s (a standard deviation, relative) from the repeats' half-range."""
    cvs = [_HALF_RANGE_TO_SD.get(o.repeats, 2 / 2.326) * o.tok_s_spread / o.tok_s
           for o in obs if o.tok_s_spread is not None and o.repeats > 1]
    return float(np.median(cvs)) if cvs else None


def profile_dict(base: Profile, values: dict[str, Any], *, name: str, description: str,
                 overrides: dict[str, Any]) -> dict[str, Any]:
    """The base profile with the fitted keys and the user's overrides, YAML-ready."""
    d = base.to_dict()
    d.update(values)
    d.update(overrides)
    d["name"] = name
    d["description"] = description
    for key, v in list(d.items()):
        if isinstance(v, float):
            d[key] = float(f"{v:.5g}")
        elif isinstance(v, tuple):
            d[key] = list(v)
    for section in ("nccl", "acceptance", "custom_all_reduce"):
        if isinstance(d.get(section), dict):
            d[section] = {k: (list(v) if isinstance(v, tuple) else
                              {a: list(b) for a, b in v.items()} if isinstance(v, dict) else v)
                          for k, v in d[section].items()}
    d["attention_backends"] = dict(d["attention_backends"])
    return d
