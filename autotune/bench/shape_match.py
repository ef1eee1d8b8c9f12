"""Is the workload shaped like production? The space's prompts against its declared production sample.

A space may name a file of production's prompts (``workload.production_sample``). The search compares
the prompts it measures with it, on the shape :mod:`autotune.bench.workload_shape` records, and says
at its start (a warning on stderr when far), in ``summary.md`` and on its MLflow run whether the two
are alike. :func:`far_reasons` is the one rule for "far" (``docs/search-spaces.md``, "Production
sample"):

* the median prompt length (characters) differs by more than a factor of :data:`LENGTH_FACTOR`;
* or the p90 prompt length does;
* or the share of prompts sharing a prefix with another differs by more than :data:`SHARE_POINTS`
  percentage points;
* or the share of distinct prompts does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.bench.workload_shape import prompt_stats, shape_text

if TYPE_CHECKING:
    from autotune.space.prompts import _Entry
    from autotune.space.workload import Workload

#: A prompt-length ratio (median or p90, space over sample) outside [1/LENGTH_FACTOR, LENGTH_FACTOR]
#: is far: twice or half the prefill work and KV cache per request.
LENGTH_FACTOR = 2.0
#: Prefix sharing or distinct-prompt shares further apart than this (percentage points) are far:
#: issue 34 measured all-shared prompts 15-22% above unshared ones at concurrency 16, so 30 points
#: stand for about 5%, the size of the gains a search separates.
SHARE_POINTS = 30.0
#: The search run's MLflow tag holding :meth:`ShapeMatch.line`.
TAG_PRODUCTION_SAMPLE = "autotune.production_sample"


def _stats(texts: list[str]) -> dict[str, Any]:
    """:func:`prompt_stats` with the share of distinct prompts and the count beside it."""
    stats = prompt_stats(texts)
    return {**stats, "prompts": len(texts),
            "distinct_pct": 100.0 * stats["distinct_prompts"] / len(texts) if texts else None}


def far_reasons(space: dict[str, Any], sample: dict[str, Any]) -> list[str]:
    """Why the space's prompt statistics are far from the sample's (:func:`_stats`'s keys); empty
    when they match. A statistic unknown on either side is not compared."""
    reasons = []
    for key, what in (("prompt_chars_p50", "median"), ("prompt_chars_p90", "p90")):
        mine, theirs = space.get(key), sample.get(key)
        if mine is None or theirs is None or theirs <= 0:
            continue
        ratio = mine / theirs
        if not 1 / LENGTH_FACTOR <= ratio <= LENGTH_FACTOR:
            reasons.append(f"{what} prompt {ratio:.2f}x the sample's ({mine:.0f} vs {theirs:.0f} chars; "
                           f"within {1 / LENGTH_FACTOR:g}-{LENGTH_FACTOR:g}x matches)")
    for key, what in (("shared_prefix_pct", "prompts sharing a prefix"), ("distinct_pct", "distinct prompts")):
        mine, theirs = space.get(key), sample.get(key)
        if mine is None or theirs is None:
            continue
        if abs(mine - theirs) > SHARE_POINTS:
            reasons.append(f"{what} {mine:.0f}% vs the sample's {theirs:.0f}% (within {SHARE_POINTS:g} "
                           "points matches)")
    return reasons


@dataclass(frozen=True)
class ShapeMatch:
    """The space's measured prompts against the production sample.

    Attributes:
        sample: The production sample's path.
        space: The measured prompts' statistics (:func:`_stats`).
        production: The sample's.
        reasons: Why the two are far (:func:`far_reasons`); empty when they match.
    """

    sample: str
    space: dict[str, Any]
    production: dict[str, Any]
    reasons: tuple[str, ...]

    @property
    def far(self) -> bool:
        """The space's prompts are far from production's."""
        return bool(self.reasons)

    def line(self) -> str:
        """One line for people: far (and why) or matched, with both shapes' figures."""
        s, p = self.space, self.production

        def n(v: Any) -> str:
            return "?" if v is None else f"{v:.0f}"

        figures = (f"prompt chars p50 {n(s['prompt_chars_p50'])} vs {n(p['prompt_chars_p50'])}, "
                   f"p90 {n(s['prompt_chars_p90'])} vs {n(p['prompt_chars_p90'])}, sharing a prefix "
                   f"{n(s['shared_prefix_pct'])}% vs {n(p['shared_prefix_pct'])}%, distinct "
                   f"{n(s['distinct_pct'])}% vs {n(p['distinct_pct'])}%")
        where = f"the production sample {self.sample} ({p['prompts']} prompts)"
        if self.far:
            return (f"the workload's prompts are far from {where}: {'; '.join(self.reasons)}. "
                    f"Its figures may not hold in production ({figures}).")
        return f"the workload's prompts match {where} ({figures})."

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the search's outcome."""
        return {"sample": self.sample, "far": self.far, "reasons": list(self.reasons),
                "space": dict(self.space), "production": dict(self.production), "line": self.line(),
                "metrics": self.metrics()}

    def metrics(self) -> dict[str, float]:
        """The search run's MLflow metrics: whether far, and the two length ratios where known."""
        out = {"production_sample_far": float(self.far)}
        for key in ("prompt_chars_p50", "prompt_chars_p90"):
            mine, theirs = self.space.get(key), self.production.get(key)
            if mine is not None and theirs:
                out[f"production_{key}_ratio"] = mine / theirs
        return out


def production_match(workload: Workload, sample: Sequence[_Entry] | None) -> ShapeMatch | None:
    """The workload's measured prompts against its production sample; None when it declares none.

    Args:
        workload: The space's workload (its measured prompts; ``production_sample`` its path).
        sample: The sample's prompts as parsed when the space loaded
            (:attr:`autotune.space.search_space.SearchSpace.production_sample`): the file is not
            read again here.

    Raises:
        ValueError: The workload declares a sample and none was given, or the reverse.
    """
    if (workload.production_sample is None) != (sample is None):
        raise ValueError("production_match needs the parsed production sample exactly when the workload "
                         f"declares one (workload: {workload.production_sample!r}, sample "
                         f"{'given' if sample is not None else 'None'})")
    if workload.production_sample is None or sample is None:
        return None
    space = _stats([shape_text(p.text, p.messages) for p in workload.measured()])
    production = _stats([shape_text(e.text, e.messages) for e in sample])
    return ShapeMatch(sample=workload.production_sample, space=space, production=production,
                      reasons=tuple(far_reasons(space, production)))
