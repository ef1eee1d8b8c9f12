"""A draft's measured per-position acceptance, overall and per prompt category, from one run.

SGLang sends each request's ``spec_correct_drafts_histogram`` (cycles that accepted ``j`` drafts)
in its final ``meta_info``; the client keeps it in the request's record with the prompt's kind
(its data's ``"category"``). Summed over requests, the histogram's tail
(:func:`autotune.search.samplers._acceptance.reach_counts`) gives the cycles that reached each
position, and

    ``rates[i] = P(accept >= i + 1 | accept >= i) = reach[i + 1] / reach[i]``

with a binomial spread over the cycles that reached position ``i`` (``sd``, from the rate with half a
count added either side, so that 0 or 1 never claims a zero spread) and a spread between
requests (``sd_requests``: the ratio estimator's variance with requests as clusters), which is the
honest one when prompts accept differently; read the larger.

What the histogram can say: for a chain (top-k 1) it is exact up to the run's steps. With top-k
> 1 the accepted path is the best branch's, so the rates are those of the tree's accepted path
(higher than the top-1 rates ``repick``'s acceptance model takes); the profile says so
(``rates_are``). Positions beyond the run's steps are unknown: absent from ``rates`` (None in
``positions``), never 0.

The result (format :data:`FORMAT`) is what ``autotune repick --acceptance-file`` reads:
``{"rates": [...], "by_category": {"code": {"rates": [...], "requests": n}, ...}}``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from autotune.search.samplers._acceptance import reach_counts

FORMAT = "autotune-acceptance-profile/1"
TOP1, TREE_PATH, UNKNOWN_SHAPE = "top-1", "tree path", "unknown"
"""Values of a profile's ``rates_are``."""

_HIST = "spec_correct_drafts_histogram"


@dataclass(frozen=True)
class PositionRate:
    """The acceptance of one draft position over the cycles that reached it.

    Attributes:
        position: 1-based draft position.
        reached: Cycles that accepted at least ``position - 1`` drafts (and could draft this one).
        accepted: Of those, the cycles that accepted this position too.
        rate: ``accepted / reached``; None when no cycle reached the position.
        sd: Binomial spread of ``rate`` over the ``reached`` cycles (half a count added either
            side); None when unknown.
        sd_requests: Spread of ``rate`` between requests (requests as clusters); None with fewer
            than two requests.
    """

    position: int
    reached: int
    accepted: int
    rate: float | None
    sd: float | None
    sd_requests: float | None


def request_histograms(records: Iterable[Mapping[str, Any]]) -> list[tuple[str | None, list[float]]]:
    """(kind, histogram) of every completed request that carries a histogram.

    Raises:
        ValueError: A histogram that is not a list of non-negative counts.
    """
    out: list[tuple[str | None, list[float]]] = []
    for n, rec in enumerate(records, 1):
        if rec.get("ok") is False or rec.get("error"):
            continue
        hist = (rec.get("spec") or {}).get(_HIST)
        if hist is None:
            continue
        if not isinstance(hist, list) or not all(
                isinstance(h, (int, float)) and not isinstance(h, bool) and h >= 0 for h in hist):
            raise ValueError(f"request {n} (prompt {rec.get('prompt_id')!r}): {_HIST} must be a list of "
                             f"non-negative counts, got {hist!r}")
        kind = rec.get("kind")
        out.append((None if kind is None else str(kind), [float(h) for h in hist]))
    return out


def position_rates(histograms: Sequence[Sequence[float]], depth: int) -> list[PositionRate]:
    """Per-position rates ``1..depth`` from per-request histograms.

    A request whose histogram is shorter than ``depth + 1`` could not accept the positions past
    its length: it counts for none of them (censored, not rejected).

    Raises:
        ValueError: A histogram with cycles that accepted more than ``depth`` drafts.
    """
    reach = []
    for n, h in enumerate(histograms, 1):
        if any(h[depth + 1:]):
            raise ValueError(f"histogram {n} has cycles that accepted more than {depth} drafts "
                             f"(the run's steps): {list(h)}")
        reach.append(reach_counts(h[:depth + 1]))
    out = []
    for pos in range(1, depth + 1):
        pairs = [(float(r[pos - 1]), float(r[pos])) for r in reach if len(r) > pos and r[pos - 1] > 0]
        reached = sum(p[0] for p in pairs)
        accepted = sum(p[1] for p in pairs)
        rate = accepted / reached if reached else None
        # Half a count either side: a rate of 0 or 1 over few cycles must not claim a zero spread.
        smooth = (accepted + 0.5) / (reached + 1)
        sd = None if rate is None else math.sqrt(smooth * (1 - smooth) / reached)
        sd_req = None
        if rate is not None and len(pairs) >= 2:
            resid = np.array([a - rate * r for r, a in pairs])
            sd_req = math.sqrt(len(pairs) / (len(pairs) - 1) * float(resid @ resid)) / reached
        out.append(PositionRate(position=pos, reached=int(reached), accepted=int(accepted), rate=rate,
                                sd=sd, sd_requests=sd_req))
    return out


def known_rates(positions: Sequence[PositionRate]) -> list[float]:
    """The rates up to the first unknown position (what an acceptance model can take)."""
    out = []
    for p in positions:
        if p.rate is None:
            break
        out.append(p.rate)
    return out


def shape_note(topk: int | None, depth: int) -> tuple[str, str]:
    """``rates_are`` and the sentence that says what the rates are, for a run of ``topk``."""
    if topk == 1:
        return TOP1, (f"a chain (top-k 1): the draft's top-1 acceptance per position, exact up to "
                      f"position {depth}; later positions unknown")
    if topk is None:
        return UNKNOWN_SHAPE, ("the run's top-k is unknown: these are the accepted path's rates, top-1 "
                               "only if the run drafted a chain")
    return TREE_PATH, (f"a top-{topk} tree: the rates of the accepted path (the best of {topk} "
                       "candidates a depth), higher than the draft's top-1 rates; measure with top-k 1 "
                       "for top-1 rates")


def _part(hists: Sequence[Sequence[float]], depth: int) -> dict[str, Any]:
    positions = position_rates(hists, depth)
    return {"rates": known_rates(positions), "positions": [asdict(p) for p in positions],
            "requests": len(hists), "cycles": int(sum(sum(h) for h in hists))}


def profile_of(records: Iterable[Mapping[str, Any]], *, steps: int | None, topk: int | None,
               source: str) -> dict[str, Any]:
    """The acceptance profile of one run's request records (format :data:`FORMAT`).

    Args:
        records: Request records (``RequestRecord.to_dict``), with ``kind`` and ``spec``.
        steps: The run's ``--speculative-num-steps``; None: the longest histogram's length - 1.
        topk: The run's ``--speculative-eagle-topk``; None when unknown (said in the profile).
        source: What the records came from, for the profile's ``source``.

    Raises:
        ValueError: No request with a histogram, or histograms that disagree with ``steps``.
    """
    hists = request_histograms(records)
    if not hists:
        raise ValueError(f"{source}: no completed request carries {_HIST} (a run without speculation, "
                         "or a server that does not send it)")
    depth = steps if steps is not None else max(len(h) for _, h in hists) - 1
    if depth < 1:
        raise ValueError(f"{source}: the histograms name no draft position")
    rates_are, note = shape_note(topk, depth)
    kinds = sorted({k for k, _ in hists if k is not None})
    return {
        "format": FORMAT, "label": "measured", "source": source, "steps": depth, "topk": topk,
        "depth_from": "steps" if steps is not None else "histogram length",
        "rates_are": rates_are, "note": note,
        **_part([h for _, h in hists], depth),
        "uncategorized_requests": sum(1 for k, _ in hists if k is None),
        "by_category": {k: _part([h for kk, h in hists if kk == k], depth) for k in kinds},
    }


def profile_text(profile: Mapping[str, Any]) -> str:
    """The profile as people read it: a table of rates and spreads per category."""
    lines = [f"measured acceptance from {profile['source']} ({profile['note']})",
             f"{'category':<14} {'requests':>8} {'cycles':>7}  rate per position (sd, sd between requests)"]
    parts = [("all", profile)] + list(profile["by_category"].items())
    for name, part in parts:
        cells = []
        for p in part["positions"]:
            if p["rate"] is None:
                cells.append(f"{p['position']}: unknown")
                continue
            sd_req = "-" if p["sd_requests"] is None else f"{p['sd_requests']:.3f}"
            cells.append(f"{p['position']}: {p['rate']:.3f} ({p['sd']:.3f}, {sd_req})")
        lines.append(f"{name:<14} {part['requests']:>8} {part['cycles']:>7}  " + "; ".join(cells))
    if profile.get("uncategorized_requests"):
        lines.append(f"{profile['uncategorized_requests']} request(s) name no category: counted in 'all' only")
    lines.append(f"positions past {profile['steps']} were not drafted in this run: unknown")
    return "\n".join(lines)
