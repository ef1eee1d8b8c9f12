"""Repick a search's configs for another acceptance, from its cost surface (issue 37).

Every figure here is a prediction (:data:`~autotune.search.cost_surface.PREDICTED`), never a
measurement:

- a **measured** config keeps its measured cost and tok/s and moves along the throughput line by
  the change of its accept length: ``1/tok' = 1/tok + a * cycle_ms * (1/L' - 1/L)``, so the
  prediction at the measured acceptance is the measurement itself;
- an **unmeasured** config of a measured group is interpolated: its cycle from the phase model's
  cycle fit (:class:`autotune.search.samplers._cycle.CycleModel`, the one cycle fit), in units of
  its group's decode step, and ``tok = 1 / (a * cycle_ms / L' + b)``. Only inside the steps, top-k
  and draft-token range that group measured; outside it nothing is said;
- ``L'`` is the accept length the per-position rates give for the config's shape
  (:meth:`autotune.space.synthetic.SyntheticAcceptance.accept_length`, the one acceptance model).

A prediction whose relative spread is above ``max_sd_pct`` is named as too uncertain, not ranked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.search.cost_surface import PREDICTED, check_format
from autotune.search.samplers._cycle import CycleModel
from autotune.space.synthetic import SyntheticAcceptance
from autotune.space.trial_config import config_key

if TYPE_CHECKING:
    from autotune.trial.result import TrialResult

__all__ = ["Prediction", "compare_at", "parse_acceptance", "predict_all", "ranking_text"]

#: Default ceiling of a trusted prediction's relative spread, percent (the issue's 3% figure).
MAX_SD_PCT = 3.0


@dataclass(frozen=True)
class Prediction:
    """One config's predicted tok/s at the asked acceptance.

    Attributes:
        params: The config.
        measured: Whether the config was measured (its cost is measured), else interpolated.
        accept_length: The accept length the rates give this shape.
        tok_s: Predicted tok/s; None when the surface cannot say.
        sd_pct: Relative spread of the prediction, percent; None when unknown.
        trusted: Within ``max_sd_pct``.
        why: Why it is not trusted (or not predicted), None when it is.
    """

    params: dict[str, Any]
    measured: bool
    accept_length: float | None
    tok_s: float | None
    sd_pct: float | None
    trusted: bool
    why: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "measured_cost": self.measured, "label": PREDICTED,
                "accept_length": self.accept_length, "predicted_tok_s": self.tok_s,
                "predicted_sd_pct": self.sd_pct, "trusted": self.trusted, "why_not": self.why}


def parse_acceptance(text: str) -> SyntheticAcceptance:
    """``rates:[0.8,0.7,...]`` (or a JSON list, or ``{"rates": [...]}``) as an acceptance model.

    Raises:
        ValueError: Not a list of per-position probabilities, with what would be right.
    """
    body = text.strip()
    if body.startswith("rates:"):
        body = body[len("rates:"):].strip()
    try:
        value = json.loads(body)
    except ValueError:
        raise ValueError(f"not rates:[0.8,0.7,...] or a JSON list: {text[:80]!r}") from None
    if isinstance(value, Mapping):
        value = value.get("rates")
    if not isinstance(value, list):
        raise ValueError("acceptance must be per-position rates, e.g. rates:[0.8,0.7,0.6]")
    return SyntheticAcceptance(tuple(value))


def parse_categories(text: str) -> dict[str, SyntheticAcceptance]:
    """The ``by_category`` rates of an acceptance profile (``autotune acceptance --json``), each
    as an acceptance model.

    Raises:
        ValueError: Not JSON, no ``by_category``, or a category whose rates are not probabilities.
    """
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    cats = value.get("by_category") if isinstance(value, Mapping) else None
    if not isinstance(cats, Mapping) or not cats:
        raise ValueError('no "by_category" object with a category in it: expected '
                         '{"by_category": {"code": {"rates": [0.8, ...]}, ...}}, as autotune acceptance '
                         "--json writes it")
    out: dict[str, SyntheticAcceptance] = {}
    for name, part in cats.items():
        rates = part.get("rates") if isinstance(part, Mapping) else None
        if not isinstance(rates, list):
            raise ValueError(f'by_category[{name!r}]: expected {{"rates": [0.8, ...]}}, got {part!r}')
        try:
            out[str(name)] = SyntheticAcceptance(tuple(rates))
        except ValueError as exc:
            raise ValueError(f"by_category[{name!r}]: {exc}") from None
    return out


def _cycle_model(surface: Mapping[str, Any]) -> tuple[CycleModel | None, dict[int, dict[str, tuple]]]:
    """The cycle fit over every measured config (phases in units of its group's decode step), and
    each group's measured (steps, topk, draft tokens) ranges."""
    groups = surface["groups"]
    rows = [c for c in surface["configs"] if groups[c["group"]]["decode_step_ms"]]
    ranges: dict[int, dict[str, tuple]] = {}
    for c in rows:
        r = ranges.setdefault(c["group"], {})
        for key in ("steps", "topk", "draft_tokens"):
            lo, hi = r.get(key, (c[key], c[key]))
            r[key] = (min(lo, c[key]), max(hi, c[key]))
    if len(rows) < 3:
        return None, ranges
    split = all(c["phases"][p]["ms"] is not None for c in rows for p in ("draft_ms", "verify_ms",
                                                                           "extend_ms", "other_ms"))
    step = np.array([groups[c["group"]]["decode_step_ms"] for c in rows], float)
    cols = ("draft_ms", "verify_ms", "extend_ms", "other_ms") if split else ("cycle_ms",)
    y = np.array([[c["phases"][p]["ms"] for p in cols] for c in rows], float) / step[:, None]
    model = CycleModel()
    model.fit(np.array([c["steps"] for c in rows]), np.array([c["topk"] for c in rows]),
              np.array([c["draft_tokens"] for c in rows]), y, split)
    return model, ranges


def predict_all(surface: Mapping[str, Any], acceptance: SyntheticAcceptance, *,
                max_sd_pct: float = MAX_SD_PCT) -> list[Prediction]:
    """Every measured config and every unmeasured one of a measured group, predicted at
    ``acceptance``; trusted ones first, best predicted tok/s first.

    Raises:
        ValueError: Not a cost surface.
    """
    check_format(surface)
    line = surface["throughput_line"]
    a, b, a_sd = line["a"], line["b"], line["a_sd"]
    resid = line["resid_sd_rel"] or 0.0
    out: list[Prediction] = []

    def length(c: Mapping[str, Any]) -> float | None:
        try:
            return acceptance.accept_length(steps=c["steps"], topk=c["topk"], draft_tokens=c["draft_tokens"])
        except ValueError:
            return None

    for c in surface["configs"]:
        L2, L1 = length(c), c["accept_length"]
        cycle = c["phases"]["cycle_ms"]["ms"]
        if L2 is None:
            out.append(Prediction(c["params"], True, None, None, None, False,
                                  f"the rates name fewer positions than its {c['steps']} steps"))
            continue
        shift = a * cycle * (1.0 / L2 - 1.0 / L1)
        tok2 = moved_tok_s(c, L2, line)
        rel_own = c["tok_s_sd_rel"]
        parts = [rel_own if rel_own is not None else 0.0]
        why = None if rel_own is not None else "its tok/s has no repeats (spread unknown)"
        if abs(shift) > 0:
            if a_sd is None:
                why = why or "the throughput line has too few points to move a config's acceptance"
            else:
                parts.append(a_sd / a * abs(shift) * tok2)
        sd = math.sqrt(sum(p * p for p in parts)) * 100.0
        trusted = why is None and sd <= max_sd_pct
        out.append(Prediction(c["params"], True, L2, tok2, sd if why is None else None, trusted,
                              why or (None if trusted else f"spread {sd:.1f}% > {max_sd_pct:g}%")))
    model, ranges = _cycle_model(surface)
    for u in surface.get("unmeasured", []):
        out.append(_interpolate(surface, u, model, ranges, acceptance, a, b, resid, max_sd_pct))
    out.sort(key=lambda p: (not p.trusted, p.tok_s is None, -(p.tok_s or 0.0)))
    return out


def moved_tok_s(config: Mapping[str, Any], accept_length: float, line: Mapping[str, Any]) -> float:
    """A measured config's tok/s moved along the throughput line to ``accept_length``:
    ``1/tok' = 1/tok + a * cycle_ms * (1/L' - 1/L)``; at the measured length, the measurement."""
    shift = line["a"] * config["phases"]["cycle_ms"]["ms"] * (1.0 / accept_length - 1.0 / config["accept_length"])
    return 1.0 / (1.0 / config["output_tok_s"] + shift)


def _interpolate(surface: Mapping[str, Any], u: Mapping[str, Any], model: CycleModel | None,
                 ranges: Mapping[int, Mapping[str, tuple]], acceptance: SyntheticAcceptance,
                 a: float, b: float, resid: float, max_sd_pct: float) -> Prediction:
    params = dict(u["params"])
    s, k, n = u["steps"], u["topk"], u["draft_tokens"]
    try:
        L2 = acceptance.accept_length(steps=s, topk=k, draft_tokens=n)
    except ValueError:
        return Prediction(params, False, None, None, None, False,
                          f"the rates name fewer positions than its {s} steps")
    r = ranges.get(u["group"])
    step = surface["groups"][u["group"]]["decode_step_ms"]
    if model is None or r is None or not step:
        return Prediction(params, False, L2, None, None, False, "its group has no measured cost")
    outside = [key for key, v in (("steps", s), ("topk", k), ("draft_tokens", n))
               if not r[key][0] <= v <= r[key][1]]
    if outside:
        return Prediction(params, False, L2, None, None, False,
                          f"{', '.join(outside)} outside the measured range (no extrapolation)")
    mu, var = model.predict(np.array([s]), np.array([k]), np.array([n]))
    cycle = float(mu[0]) * step
    tok = 1.0 / (a * cycle / L2 + b)
    cyc_rel = math.sqrt(float(var[0])) / float(mu[0])
    # The cycle's share of a token's time carries its spread; the line's residual adds to it.
    share = a * cycle / L2 * tok
    sd = math.sqrt((cyc_rel * share) ** 2 + resid ** 2) * 100.0
    trusted = sd <= max_sd_pct
    return Prediction(params, False, L2, tok, sd, trusted,
                      None if trusted else f"spread {sd:.1f}% > {max_sd_pct:g}%")


def _num(value: float | None, spec: str) -> str:
    width = int(spec.lstrip("+").split(".")[0])
    return f"{value:{spec}}" if value is not None else "-".rjust(width)


def _label(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k.replace('speculative_', '')}={v}" for k, v in params.items()
                     if k != "speculative_algorithm")


def ranking_text(preds: list[Prediction], *, space: str, top: int = 10, confirm: int = 2) -> str:
    """The ranking as people read it: trusted predictions, the untrusted ones named, and the
    ``python -m autotune.trial`` commands that confirm the top ones on a GPU."""
    trusted = [p for p in preds if p.trusted]
    lines = [f"{PREDICTED} tok/s (not measured) for the asked acceptance; cost from the search's "
             "measurements", f"{'rank':>4}  {'predicted tok/s':>15}  {'+-%':>5}  {'accept':>6}  cost  config"]
    for i, p in enumerate(trusted[:top], 1):
        lines.append(f"{i:>4}  {p.tok_s:>15.1f}  {p.sd_pct:>5.1f}  {p.accept_length:>6.2f}  "
                     f"{'meas' if p.measured else 'intp'}  {_label(p.params)}")
    if len(trusted) > top:
        lines.append(f"  ... {len(trusted) - top} more trusted predictions (--top N, --json)")
    shaky = [p for p in preds if not p.trusted]
    if shaky:
        lines.append(f"too uncertain to rank ({len(shaky)}):")
        for p in shaky[:top]:
            lines.append(f"  {_label(p.params)}: {p.why}")
        if len(shaky) > top:
            lines.append(f"  ... {len(shaky) - top} more")
    if trusted:
        lines.append("confirm on a GPU:")
        for p in trusted[:confirm]:
            lines.append(f"  python -m autotune.trial --space {space} --params "
                         f"'{json.dumps(p.params)}' --json")
    return "\n".join(lines)


def compare_at(surface: Mapping[str, Any], acceptance: SyntheticAcceptance,
               measured: Sequence[TrialResult]) -> dict[str, Any]:
    """The proof's comparison: each config measured at ``acceptance`` against its prediction from
    ``surface`` (measured at another acceptance), and the repick against the measured best.

    Only configs with a prediction and a feasible-or-infeasible measurement are compared; the
    repick ranks those same configs (trusted predictions only). A config measured at
    ``acceptance`` only (not in the surface) is compared with its interpolated prediction
    (``cost``: ``interpolated``).

    Returns:
        ``rows`` (params, predicted, measured, error_pct, trusted), ``compared``,
        ``max_abs_error_pct``, ``pick`` and ``best`` (params and measured tok/s), ``pick_share``
        (the pick's measured tok/s over the best's) and ``text``.
    """
    preds = {config_key(p.params): p for p in predict_all(surface, acceptance)}
    costs = {config_key(c["params"]): c for c in surface["configs"]}
    rows: list[dict[str, Any]] = []
    for result in measured:
        key = config_key(result.params)
        p = preds.get(key)
        if p is None or p.tok_s is None or result.output_tok_s is None or result.status == "failed":
            continue
        # The same move to the accept length the run drew: the cost surface's own error, apart
        # from how far the drawn acceptance fell from the asked one.
        realised = (moved_tok_s(costs[key], result.accept_length, surface["throughput_line"])
                    if key in costs and result.accept_length else None)
        rows.append({"params": dict(result.params), "cost": "measured" if p.measured else "interpolated",
                     "predicted_tok_s": p.tok_s,
                     "predicted_sd_pct": p.sd_pct, "trusted": p.trusted,
                     "measured_tok_s": result.output_tok_s,
                     "asked_accept_length": p.accept_length, "measured_accept_length": result.accept_length,
                     "error_pct": 100.0 * (p.tok_s / result.output_tok_s - 1.0),
                     "error_at_measured_accept_pct": None if realised is None
                     else 100.0 * (realised / result.output_tok_s - 1.0)})
    best = max(rows, key=lambda r: r["measured_tok_s"], default=None)
    ranked = [r for r in rows if r["trusted"]] or rows
    pick = max(ranked, key=lambda r: r["predicted_tok_s"], default=None)
    share = (pick["measured_tok_s"] / best["measured_tok_s"]) if pick and best else None
    worst = max((abs(r["error_pct"]) for r in rows), default=None)
    lines = [f"{PREDICTED} from the first acceptance's cost surface, measured at the second; "
             "'at L meas.': the same prediction at the accept length the run drew",
             f"{'predicted':>10} {'measured':>10} {'error %':>8} {'L asked':>7} {'L meas.':>7} "
             f"{'at L meas. %':>12}  cost  config"]
    lines += [f"{r['predicted_tok_s']:>10.1f} {r['measured_tok_s']:>10.1f} {r['error_pct']:>+8.2f} "
              f"{r['asked_accept_length']:>7.3f} {_num(r['measured_accept_length'], '7.3f')} "
              f"{_num(r['error_at_measured_accept_pct'], '+12.2f')}  {r['cost'][:4]}  {_label(r['params'])}"
              for r in rows]
    drawn = [abs(r["error_at_measured_accept_pct"]) for r in rows
             if r["error_at_measured_accept_pct"] is not None]
    if worst is not None:
        lines.append(f"max |error| {worst:.2f}% over {len(rows)} configs"
                     + (f"; at the accept length drawn {max(drawn):.2f}%" if drawn else ""))
    if pick and best and share is not None:
        lines.append(f"repick: {_label(pick['params'])} measured {pick['measured_tok_s']:.1f} tok/s, "
                     f"{100 * share:.1f}% of the measured best ({_label(best['params'])}, "
                     f"{best['measured_tok_s']:.1f})")
    return {"rows": rows, "compared": len(rows), "max_abs_error_pct": worst,
            "max_abs_error_at_measured_accept_pct": max(drawn) if drawn else None,
            "pick": pick, "best": best, "pick_share": share, "text": "\n".join(lines)}
