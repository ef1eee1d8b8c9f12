"""The phase-cost table a runtime controller needs, from a search's cost surface (issue 37, item 4).

Batch size x steps x top-k x draft tokens -> draft, verify, re-extend and other ms per cycle, each
with its spread: every measured config of the surface at the batch size its workload ran
(``workload.concurrency``), and with concurrency levels (``concurrency: [1, 16, 64]``) at each
level, every level's costs from its own measurement. Format :data:`FORMAT`, JSON.

SGLang 0.5.23's adaptive speculation reads no costs: its ``--speculative-adaptive-config`` is per
batch size the step counts to move among (``candidate_steps``), chains only (top-k 1, draft tokens
= steps + 1; :mod:`autotune.sglang.adaptive`). :func:`adaptive_candidates` writes that shape from
the table: at each batch size, the chain step counts whose costs were measured there, so the
controller only moves among steps whose cost is known. It is checked with SGLang's own loader
(:func:`autotune.sglang.adaptive.check_table`) as the adaptive export is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.search.cost_surface import PHASES, levels_of
from autotune.sglang.adaptive import adaptive_table

__all__ = ["FORMAT", "adaptive_candidates", "phase_cost_table"]

FORMAT = "autotune-phase-costs/1"


def phase_cost_table(surface: Mapping[str, Any]) -> dict[str, Any]:
    """Every measured config's phase costs, keyed by batch size, steps, top-k and draft tokens.

    A surface with concurrency levels gives one entry per config measured at each level, the level
    being the batch size; request-rate levels name no batch size and are left out (``skipped``).

    Raises:
        ValueError: Not a cost surface, or no level of it names the batch size it ran at.
    """
    levels = levels_of(surface)
    parts = surface["levels"] if levels else [surface]
    skipped = [lv.describe() for lv, part in zip(levels, surface["levels"] if levels else [], strict=True)
               if not _batch(part)]
    rows = []
    for part in parts:
        batch = _batch(part)
        for c in part["configs"] if batch is not None else ():
            row: dict[str, Any] = {"batch_size": batch, "steps": c["steps"], "topk": c["topk"],
                                   "draft_tokens": c["draft_tokens"], "group": c["group"]}
            for name in PHASES:
                phase = c["phases"][name]
                row[name], row[name.replace("_ms", "_sd_ms")] = phase["ms"], phase["sd_ms"]
            rows.append(row)
    if not any(_batch(part) for part in parts):
        raise ValueError("the cost surface names no batch size (a workload with a concurrency "
                         "cap); its costs cannot be keyed by batch size")
    rows.sort(key=lambda r: (r["group"], r["batch_size"], r["steps"], r["topk"], r["draft_tokens"]))
    return {"format": FORMAT, "search": surface.get("search"),
            "note": "measured ms per verify cycle (device timer); sd_ms from the repeats' spread",
            "batch_sizes": sorted({r["batch_size"] for r in rows}),
            "skipped": [f"{d}: an open-loop rate names no batch size" for d in skipped],
            "groups": [g["params"] for g in surface["groups"]], "entries": rows}


def _batch(part: Mapping[str, Any]) -> int | None:
    batch = part.get("batch_size")
    return batch if isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1 else None


def adaptive_candidates(table: Mapping[str, Any], *, group: int = 0) -> dict[str, dict[str, Any]]:
    """SGLang's ``--speculative-adaptive-config`` from a phase-cost table: per batch size, the
    chain (top-k 1) step counts of ``group`` whose costs the table holds.

    Raises:
        ValueError: No chain config of that group was measured (SGLang adapts chains only).
    """
    steps: dict[int, set[int]] = {}
    for row in table["entries"]:
        if row["group"] == group and row["topk"] == 1 and row["draft_tokens"] == row["steps"] + 1:
            steps.setdefault(row["batch_size"], set()).add(row["steps"])
    if not steps:
        raise ValueError("no top-k 1 chain was measured in this group; SGLang's adaptive "
                         "speculation moves among chain step counts only")
    out = adaptive_table({bs: min(s) for bs, s in steps.items()})
    for bs, s in steps.items():
        out[str(bs)]["candidate_steps"] = sorted(s)
    return out
