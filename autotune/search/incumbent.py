"""The search's incumbent: the best config so far, its evidence kept where the trials read it.

The driver's callback writes it (:meth:`IncumbentFile.update`) each time a trial completes, as a
small JSON file in the run folder beside the baseline store; each trial reads it after every round
(:meth:`IncumbentFile.read`), so a config is compared with the incumbent of the moment, also one a
concurrent trial set. The file is a path (picklable, no global state), written atomically; when it
cannot be read the trial has no incumbent and measures ``min_rounds`` (as the search's first
trial does). Also the one way a trial result becomes a :class:`~autotune.trial.winner.Contender`
(:func:`contender`), which the conclusion ranks by as well.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from autotune.figures import finite
from autotune.search.trial_report import TrialEntry
from autotune.trial.level_results import LoadLevel, level_result, levels_measured
from autotune.trial.outcome import Status
from autotune.trial.result import TrialResult
from autotune.trial.sequential import Evidence, pooled_noise, readings_of
from autotune.trial.winner import TRIAL, Contender, pick_winner

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

__all__ = ["INCUMBENT_FILE", "IncumbentFile", "contender", "evidence_of", "incumbent_of"]

#: The incumbent's file in a search's run folder.
INCUMBENT_FILE = "incumbent.json"


def contender(result: TrialResult, space: SearchSpace, *, stage: str = TRIAL) -> Contender:
    """A trial result as the winner policy sees it, valued by the space's objective."""
    return Contender(ref=result, value=finite(result.metric(space.objective.metric)),
                     is_baseline=bool(result.is_baseline),
                     feasible=result.status == Status.FEASIBLE, stage=stage)


def evidence_of(result: TrialResult, space: SearchSpace, *, label: str = "") -> Evidence | None:
    """A result's per-round readings of the objective as evidence; None when it has none."""
    readings = readings_of(space.objective.metric, result.output_tok_s_repeats,
                           baseline_tok_s=result.baseline_tok_s)
    return Evidence.from_dict({"readings": readings, "label": label}) if readings else None


def incumbent_of(space: SearchSpace, entries: Sequence[TrialEntry], *,
                 level: LoadLevel | None = None) -> Evidence | None:
    """The evidence of the best trial so far by the winner policy, None when none is feasible,
    with the pooled noise of every other measured trial (:func:`~autotune.trial.sequential.pooled_noise`).

    ``level``: the incumbent at one load level (each trial's record there, as
    :func:`~autotune.trial.level_results.level_result` gives it, judged against the baseline's same
    level); None: the trials' results as they are (the primary level's).
    """
    results: list[tuple[str, TrialResult]] = []
    for e in entries:
        result = e.report.result
        if result is not None and level is not None:
            result = level_result(result, level)
        if result is not None:
            results.append((e.trial_id, result))
    pick = pick_winner([contender(r, space) for _, r in results],
                       maximize=space.objective.direction == "maximize")
    if pick is None:
        return None
    found = evidence_of(pick.ref, space, label=next((t for t, r in results if r is pick.ref), ""))
    if found is None:
        return None
    return replace(found, noise=pooled_noise([r.output_tok_s_repeats for _, r in results
                                              if r is not pick.ref and r.ok]))


class IncumbentFile:
    """The incumbent's evidence in one JSON file (``<run folder>/incumbent.json``).

    Args:
        path: The file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> Evidence | None:
        """The incumbent now, None when there is none (or the file cannot be read)."""
        return Evidence.from_dict(self._data())

    def read_level(self, level: LoadLevel) -> Evidence | None:
        """The incumbent at one load level now (its label's entry under ``levels``), None when
        there is none there."""
        levels = self._data().get("levels")
        return Evidence.from_dict(levels.get(level.label)) if isinstance(levels, dict) else None

    def _data(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def update(self, space: SearchSpace, entries: Sequence[TrialEntry]) -> Evidence | None:
        """Write the incumbent of ``entries``, and with load levels each level's under ``levels``
        (remove the file when there is none anywhere); returns the primary level's."""
        evidence = incumbent_of(space, entries)
        levels = next((measured for e in entries if (measured := levels_measured(e.report.result))), [])
        per_level = {level.label: best.to_dict() for level in levels
                     if (best := incumbent_of(space, entries, level=level)) is not None}
        try:
            if evidence is None and not per_level:
                self.path.unlink(missing_ok=True)
                return None
            data: dict[str, Any] = evidence.to_dict() if evidence is not None else {}
            if per_level:
                data["levels"] = per_level
            tmp = self.path.with_suffix(f".tmp-{os.getpid()}")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)
        except OSError:
            pass  # trials then measure as if alone; the search goes on
        return evidence
