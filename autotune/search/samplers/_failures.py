"""Which candidates are likely to fail, from the trials that did (part of the phase model).

Configs that fail blame the setting values never seen in a config that ran, a value that explains
several failures taking the blame from those that merely shared one with it; a baseline out of
memory blames the server's arguments, not environment variables, and a TP blamed for it every
smaller TP too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autotune.search.samplers._candidates import CandidateTable
from autotune.search.samplers._observations import Observation
from autotune.trial.outcome import Failure


def _tp_dim(table: CandidateTable) -> int | None:
    """The dim of ``tp_size`` when it is searched over positive integers, else None."""
    for j in table.group_dims:
        d = table.dims[j]
        if d.name == "tp_size" and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                       for v in d.values):
            return j
    return None


def failure_probability(table: CandidateTable, obs: Sequence[Observation]) -> np.ndarray:
    """Blame each failure on the setting values never seen in a config that ran."""
    seen_ok: set[tuple[int, int]] = set()
    for o in obs:
        if o.index is not None and o.ok:
            seen_ok.update((j, int(c)) for j, c in enumerate(table.coords[o.index]) if c >= 0)
    dead_groups: set[int] = set()
    group_dims = set(table.group_dims)
    tp_j = _tp_dim(table)
    oom_tp: list[int] = []
    failures: list[list[tuple[int, int]]] = []
    for o in obs:
        if o.index is None or o.ok:
            continue
        if o.baseline_failed:
            # Without a baseline no config of the group can be proven to pay: the group is
            # done, and only its non-speculative settings are suspects.
            dead_groups.add(int(table.group[o.index]))
        suspects = [(j, int(c)) for j, c in enumerate(table.coords[o.index])
                    if c >= 0 and (j, int(c)) not in seen_ok
                    and (not o.baseline_failed or j in group_dims)]
        if o.baseline_failed and o.failure == Failure.OOM:
            # Out of memory with speculation off: what sizes memory per GPU are the server's
            # arguments (TP shards the weights and the KV cache), not environment variables
            # (NCCL's algorithm and protocol), so these are cleared while an argument is a suspect.
            args = [sus for sus in suspects if not table.dims[sus[0]].env]
            if args:
                suspects = args
            if tp_j is not None and any(j == tp_j for j, _ in suspects):
                oom_tp.append(int(table.coords[o.index, tp_j]))
        if suspects:
            failures.append(suspects)
    blame = _share_blame(failures)
    p_of: dict[tuple[int, int], float] = {}
    for (j, c), w in blame.items():
        # A value alone to blame is almost surely the cause (start-up failures repeat), and
        # surer with every failure it alone explains; one of two suspects is about even odds.
        p_of[(j, c)] = 0.95 * w if w < 1 else 1.0 - 0.05 ** w
    if tp_j is not None:
        # Memory per GPU only grows as TP shrinks: a TP blamed for running out of memory
        # passes its blame to every smaller TP never seen running.
        tp_values = table.dims[tp_j].values
        for c in oom_tp:
            p = p_of.get((tp_j, c), 0.0)
            for c2, v in enumerate(tp_values):
                if v < tp_values[c] and (tp_j, c2) not in seen_ok:
                    p_of[(tp_j, c2)] = max(p_of.get((tp_j, c2), 0.0), p)
    survive = np.ones(len(table))
    for (j, c), p in p_of.items():
        survive *= np.where(table.coords[:, j] == c, 1 - p, 1.0)
    if dead_groups:
        survive[np.isin(table.group, list(dead_groups))] = 0.0
    return 1 - survive


def _share_blame(failures: list[list[tuple[int, int]]], rounds: int = 20) -> dict[tuple[int, int], float]:
    """Each failure's unit of blame shared among its suspects, explaining away: a suspect that
    could explain other failures too takes a larger share of each, so that one value behind
    every failure (a TP too small to fit) clears the others that merely shared a failure with it.

    Starts from equal shares; each round re-shares every failure in proportion to each suspect's
    total blame of the round before. A failure alone keeps equal shares.
    """
    blame: dict[tuple[int, int], float] = {}
    for suspects in failures:
        for sus in suspects:
            blame[sus] = blame.get(sus, 0.0) + 1.0 / len(suspects)
    for _ in range(rounds if len(failures) > 1 else 0):
        new: dict[tuple[int, int], float] = {}
        for suspects in failures:
            total = sum(blame[sus] for sus in suspects)
            for sus in suspects:
                new[sus] = new.get(sus, 0.0) + blame[sus] / total
        blame = new
    return blame
