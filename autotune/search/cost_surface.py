"""A search's cost surface: what each measured config's cycle costs, apart from its acceptance.

The best speculative config depends on cost (model, GPU, batch size) and on acceptance (the draft
and the content). A search measures both at once; this module keeps the cost side of every
measured config so that tok/s can be *predicted* for another acceptance without new GPU runs
(issue 37):

- per measured config: draft ms a cycle and per step, verify ms a cycle (with the config's draft
  tokens and tree shape), re-extend ms, other ms, each with its spread, and the measured tok/s and
  accept length it was measured at;
- per group (the non-speculative settings): the decode step of its baseline;
- the throughput line ``1 / tok_s = a * cycle_ms / accept_length + b`` over the search's
  measurements (the phase model's line, fitted here by least squares so its slope has a spread).

:func:`surface_of` builds the surface (a JSON-ready dict, format :data:`FORMAT`), which the search
writes beside its report files and logs on its MLflow run as ``report/cost_surface.json``;
:mod:`autotune.search.repick` predicts from it. Every figure that comes from the surface at another
acceptance is a prediction and is labelled so (:data:`PREDICTED`); the surface itself holds only
measurements and the fit.

Costs belong to a batch size, so a search with load levels (``workload.concurrency: [1, 16, 64]``)
keeps one surface per level in ``levels``, each from that level's measurement of every config
(:func:`autotune.trial.level_results.level_result`); the top of the file is the primary level's, in
the single-level shape, so a reader that knows nothing of levels reads the primary level.
:func:`at_level` gives one level's surface in that shape; :func:`check_format` refuses another
format by name.

What it does not cover yet: finalists' re-measurements (the first measurement of a config is kept).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.search.samplers._candidates import ALGO, DRAFT, STEPS, TOPK
from autotune.space.load_levels import CONCURRENCY, LoadLevel, concurrency_of, primary_level
from autotune.space.trial_config import config_key
from autotune.trial.level_results import level_result, levels_measured

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace
    from autotune.trial.result import TrialResult

__all__ = ["COST_SURFACE_JSON", "FORMAT", "PHASES", "PREDICTED", "at_level", "check_format", "levels_of",
           "surface_of", "throughput_line"]

FORMAT = "autotune-cost-surface/1"
COST_SURFACE_JSON = "cost_surface.json"
#: The label every tok/s derived from the surface carries (never a measurement).
PREDICTED = "predicted"
#: The cycle parts kept per config, ms per verify cycle.
PHASES = ("draft_ms", "verify_ms", "extend_ms", "other_ms", "cycle_ms")


def _log_sd(values: Sequence[float]) -> float | None:
    """Relative spread of repeats (sd of ln values), None with fewer than two."""
    vals = [v for v in values if isinstance(v, (int, float)) and v > 0]
    if len(vals) < 2:
        return None
    return statistics.stdev(math.log(v) for v in vals)


def _triple(space: SearchSpace, params: Mapping[str, Any]) -> tuple[int, int, int] | None:
    ctx = {**dict(getattr(space, "fixed_args", {}) or {}), **params}
    if ctx.get(ALGO) is None:
        return None
    triple = tuple(ctx.get(n) for n in (STEPS, TOPK, DRAFT))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in triple):
        return None
    return triple  # type: ignore[return-value]


def _other_ms(phases: Mapping[str, Any]) -> float | None:
    other = phases.get("other_ms")
    if other is not None:
        return float(other)
    parts = [phases.get(k) for k in ("cycle_ms", "draft_ms", "verify_ms", "extend_ms")]
    if any(p is None for p in parts):
        return None
    return float(parts[0]) - float(sum(parts[1:]))  # type: ignore[arg-type]


def _config_entry(space: SearchSpace, result: TrialResult, group: int) -> dict[str, Any] | None:
    """One measured speculative config's costs, or None when it has none to keep."""
    triple = _triple(space, result.params)
    phases = result.phases or {}
    if (triple is None or result.status == "failed" or result.output_tok_s is None
            or result.accept_length is None or phases.get("cycle_ms") is None):
        return None
    steps, topk, draft = triple
    rel = _log_sd(result.output_tok_s_repeats)
    # cycle_ms = wall / cycles, so a repeat's phases move with its tok/s: the relative spread
    # of the repeats is each phase's spread (per-repeat phase splits are not kept).
    parts: dict[str, Any] = {}
    for name in PHASES:
        ms = _other_ms(phases) if name == "other_ms" else phases.get(name)
        ms = None if ms is None else float(ms)
        parts[name] = {"ms": ms, "sd_ms": None if ms is None or rel is None else abs(ms) * rel}
    draft_ms = parts["draft_ms"]["ms"]
    return {
        "params": dict(result.params), "group": group, "steps": steps, "topk": topk,
        "draft_tokens": draft, "status": result.status,
        "output_tok_s": result.output_tok_s, "output_tok_s_repeats": list(result.output_tok_s_repeats),
        "tok_s_sd_rel": rel, "accept_length": result.accept_length,
        "acceptance": result.acceptance, "phases": parts,
        "draft_ms_per_step": None if draft_ms is None else draft_ms / steps,
    }


def throughput_line(points: Iterable[tuple[float, float]]) -> dict[str, float | None]:
    """Least squares of ``1 / tok_s = a * x + b``, ``x`` = cycle ms per token (per decode step
    for a baseline): ``a``, ``b``, the spread of ``a`` and the relative residual spread.

    With fewer than three points the line goes through the origin (``b`` = 0) and ``a``'s spread is
    unknown (None): the caller must not trust a prediction that leans on it.
    """
    pts = [(x, 1.0 / t) for x, t in points if x > 0 and t > 0]
    if not pts:
        raise ValueError("no measured config with a cycle time, accept length and tok/s")
    x = np.array([p[0] for p in pts])
    u = np.array([p[1] for p in pts])
    if len(pts) < 3 or float(np.ptp(x)) <= 1e-9 * float(np.mean(x)):
        a = float(np.median(u / x))
        return {"a": a, "b": 0.0, "a_sd": None, "resid_sd_rel": None, "points": len(pts)}
    X = np.stack([x, np.ones_like(x)], axis=1)
    coef, *_ = np.linalg.lstsq(X, u, rcond=None)
    resid = u - X @ coef
    dof = max(len(pts) - 2, 1)
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.inv(X.T @ X)
    return {"a": float(coef[0]), "b": float(coef[1]), "a_sd": math.sqrt(max(float(cov[0, 0]), 0.0)),
            "resid_sd_rel": float(np.sqrt(np.mean((resid / u) ** 2))), "points": len(pts)}


def _first_and_groups(space: SearchSpace, results: Sequence[TrialResult]
                      ) -> tuple[list[TrialResult], list[dict[str, Any]], list[dict[str, Any]]]:
    """The first measurement of each config, the groups (non-speculative settings, in the order
    first met: measured, then enumerated) and the space's speculative configs not measured."""
    groups: list[dict[str, Any]] = []
    index: dict[tuple, int] = {}

    def group_of(params: Mapping[str, Any]) -> int:
        base = space.baseline_params(params)
        key = config_key(base)
        if key not in index:
            index[key] = len(groups)
            groups.append({"params": base, "decode_step_ms": None, "baseline_tok_s": None})
        return index[key]

    first: list[TrialResult] = []
    seen: set[tuple] = set()
    for result in results:
        key = config_key(result.params)
        if key not in seen:
            seen.add(key)
            first.append(result)
            group_of(result.params)
    candidates = []
    for cfg in space.enumerate():
        triple = _triple(space, cfg)
        if triple is not None and config_key(cfg) not in seen:
            candidates.append({"params": dict(cfg), "group": group_of(cfg), "steps": triple[0],
                               "topk": triple[1], "draft_tokens": triple[2]})
    return first, groups, candidates


def _costs_at(space: SearchSpace, first: Sequence[TrialResult | None],
              groups: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One load's ``groups`` (with their decode step and baseline tok/s), ``configs`` and
    ``throughput_line`` (None when no config there has costs) from each config's result at it."""
    index = {config_key(g["params"]): i for i, g in enumerate(groups)}
    filled = [{**g} for g in groups]
    configs: list[dict[str, Any]] = []
    for result in first:
        if result is None:  # this config has no measurement at this level
            continue
        g = index[config_key(space.baseline_params(result.params))]
        if result.is_baseline:
            if result.status != "failed" and result.output_tok_s is not None:
                filled[g]["baseline_tok_s"] = result.output_tok_s
                filled[g]["decode_step_ms"] = (result.phases or {}).get("cycle_ms")
            continue
        if filled[g]["decode_step_ms"] is None and result.baseline_decode_step_ms is not None:
            filled[g]["decode_step_ms"] = result.baseline_decode_step_ms
            filled[g]["baseline_tok_s"] = result.baseline_tok_s
        entry = _config_entry(space, result, g)
        if entry is not None:
            configs.append(entry)
    points = [(c["phases"]["cycle_ms"]["ms"] / c["accept_length"], c["output_tok_s"]) for c in configs]
    points += [(g["decode_step_ms"], g["baseline_tok_s"]) for g in filled
               if g["decode_step_ms"] and g["baseline_tok_s"]]
    return {"groups": filled, "configs": configs, "throughput_line": throughput_line(points) if configs else None}


def _batch(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _single_batch(workload: Mapping[str, Any]) -> int | None:
    """The batch size a single-level workload's costs belong to: its closed-loop cap. None for an
    open-loop rate, which this file does not key, even where a concurrency cap bounds it: the
    requests in flight then follow the rate, not the cap."""
    if workload.get("request_rate") is not None:
        return None
    return _batch(concurrency_of(workload))


def surface_of(space: SearchSpace, results: Iterable[TrialResult], *, name: str) -> dict[str, Any]:
    """The cost surface of a search's measurements (the first of each config), JSON-ready.

    With load levels (``workload.concurrency: [1, 16, 64]``) the top level is the primary level's
    surface (what a reader of a single-level surface reads) and ``levels`` holds every level's,
    each from that level's measurement of each config.

    Args:
        space: The search's space (its enumeration gives the configs a repick may interpolate).
        results: Every measured result, trials and baselines, in the order measured.
        name: The search's name.

    Raises:
        ValueError: Nothing usable was measured (no speculative config with phases and tok/s; at
            the primary level, with load levels).
    """
    first, groups, candidates = _first_and_groups(space, list(results))
    measured = next((found for found in map(levels_measured, first) if found), [])
    primary = (primary_level(space.workload) or measured[0]) if measured else None
    per_level = {lv: _costs_at(space, [level_result(r, lv) for r in first], groups) for lv in measured}
    top = per_level[primary] if primary is not None and primary in per_level else _costs_at(space, first, groups)
    if not top["configs"]:
        raise ValueError(f"search {name!r} measured no speculative config with phases, accept "
                         "length and tok/s: there is no cost surface to keep")
    model = space.synthetic_acceptance
    surface: dict[str, Any] = {
        "format": FORMAT, "search": name, "space": space.file,
        "batch_size": _single_batch(space.workload),
        "note": ("measured costs of each config; tok/s at any other acceptance computed from this "
                 f"file is {PREDICTED}, never a measurement"),
        "acceptance": {"source": top["configs"][0]["acceptance"],
                       "rates": list(model.rates) if model is not None else None},
        "throughput_line": top["throughput_line"],
        "groups": top["groups"], "configs": top["configs"], "unmeasured": candidates,
    }
    if primary is None:
        return surface
    surface["batch_size"] = _level_batch(primary)
    surface["level"] = primary.field()
    surface["levels"] = [{**lv.field(), "batch_size": _level_batch(lv), **part}
                         for lv, part in per_level.items()]
    return surface


def _level_batch(level: LoadLevel) -> int | None:
    """A concurrency level is the batch size its costs belong to; an open-loop rate names none."""
    return int(level.value) if level.axis == CONCURRENCY else None


def levels_of(surface: Mapping[str, Any]) -> list[LoadLevel]:
    """The load levels a surface keeps, in the order measured; [] for a single-level one.

    Raises:
        ValueError: Not a cost surface this autotune reads.
    """
    check_format(surface)
    return [LoadLevel.of_record(part) for part in surface.get("levels") or []]


def at_level(surface: Mapping[str, Any], key: str | None) -> tuple[dict[str, Any], LoadLevel | None]:
    """The surface of one load level, in the single-level shape every reader takes, and its level.

    Args:
        surface: A cost surface.
        key: A level's key (``"8"`` for concurrency 8, ``"r2.5"`` for 2.5 requests/s); None for
            the primary level (the top of the file).

    Raises:
        ValueError: Not a cost surface, or a level it does not keep (the message names those it does).
    """
    levels = levels_of(surface)
    primary = LoadLevel.of_record(surface["level"]) if levels and surface.get("level") else None
    if key is None:
        return dict(surface), primary
    try:
        wanted = LoadLevel.from_key(str(key).strip())
    except ValueError:
        wanted = None
    if wanted is None or wanted not in levels:
        have = (", ".join(f"{lv.key} ({lv.describe()})" for lv in levels) if levels
                else "none: a single-level search" + (f" at batch size {surface['batch_size']}"
                                                       if surface.get("batch_size") else ""))
        raise ValueError(f"--level {key}: the cost surface keeps no such level; its levels: {have}")
    part = next(p for p in surface["levels"] if LoadLevel.of_record(p) == wanted)
    if not part["configs"]:
        raise ValueError(f"--level {key}: no speculative config was measured with phases, accept "
                         f"length and tok/s at {wanted.describe()}")
    view = {k: v for k, v in surface.items() if k != "levels"}
    view.update({k: v for k, v in part.items() if k in ("batch_size", "groups", "configs", "throughput_line")})
    view["level"] = wanted.field()
    return view, wanted


def check_format(surface: Any) -> None:
    """Refuse what is not a cost surface of :data:`FORMAT`, saying which format it is.

    Raises:
        ValueError: Not a JSON object, no format, or another format (a newer autotune's).
    """
    found = surface.get("format") if isinstance(surface, Mapping) else None
    if found == FORMAT:
        return
    if isinstance(found, str) and found.startswith(FORMAT.rsplit("/", 1)[0] + "/"):
        raise ValueError(f"cost surface format {found!r}: this autotune reads {FORMAT!r} only "
                         "(a file from another version of autotune; repick with that version)")
    raise ValueError(f"not a cost surface (format {FORMAT!r} expected, found {found!r})")
