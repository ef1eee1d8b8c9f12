"""Peers' search strategies as samplers, written from their public descriptions (issue 15).

SGLang's ``auto_benchmark`` (``python -m sglang.auto_benchmark run --config C``) searches server
flags in *tiers*. What it does, read from its public source and its skill description:

- ``python/sglang/auto_benchmark_lib.py`` (``build_candidates``, ``run_auto_benchmark``) of
  https://github.com/sgl-project/sglang, read at commits
  ``2e45aa870c4e086b0e86ec660c20f16e492c6ded`` and ``e5c00dc83b965029829a285eb9bb1ccac186954c``
  (the tier logic is the same in both; the later one also drops candidates the local GPU cannot
  run);
- ``.claude/skills/sglang-auto-benchmark/SKILL.md`` ("Search Tiers", "Base Tuning Before EAGLE"),
  commit ``10c578e39e1f17f58a0c858c3ef55ae418bf3518``.

1. **Knobs in file order.** ``search_space`` is a YAML mapping whose key order is the priority
   ("YAML key order matters. Put the most important search keys first"); each knob's values are
   tried in the order listed.
2. **Candidates of a tier.** The first candidate is the baseline (``base_flags``: every knob at
   its default). Tier 1 keeps the first 6 knobs and the first 2 values of each and varies one knob
   at a time over the baseline. Tier 2 keeps the first 8 knobs and 3 values, runs the cartesian
   product of the first 3 knobs (first knob outermost), then varies each remaining knob alone.
   Duplicates are dropped; ``search.max_candidates`` (8 when omitted) caps the list.
3. **Two stages.** A *base* stage runs the tier over the non-speculative server flags with
   speculation off and keeps the best run (throughput under the SLA). Only then a *speculative*
   stage runs the same tier over ``speculative.search_space`` on top of the best base flags.
   Nothing runs after the second stage.

How that maps onto an autotune space (documented in ``docs/samplers.md``):

- The knobs are the space's parameters in file order; the base stage takes the non-speculative
  ones, the speculative stage the ``speculative_*`` ones. A knob's values are its choices as
  listed, a range's values ascending.
- A knob's default (what ``base_flags`` holds; a knob auto_benchmark leaves out is left to SGLang)
  is ``null`` when the knob can be unset, ``false`` for a boolean flag (left off the command
  line), else its first value (as ``server.parallel`` takes its first value for ``base_flags``).
  ``speculative_algorithm`` defaults to its first non-null choice in the speculative stage.
  Steps, top-k and draft tokens default to SGLang's own auto-picked triple
  (:func:`autotune.space.warm_start.sglang_default`: 3/1/4, or 5/4/8 for Llama and Grok targets), what
  auto_benchmark's first speculative candidate runs (it sets none of the three), when the space
  can run it; else to their first values. auto_benchmark itself, given one of the three alone,
  trips SGLang's check (steps unset needs top-k and draft tokens unset) unless
  ``speculative.base_flags`` sets the triple; here the other two stay at the defaults, as if
  ``base_flags`` held SGLang's triple.
- Every candidate goes through the space's own define-by-run, so a value SGLang forces is forced
  (top-k 1 makes draft tokens steps + 1) and a parameter whose ``when:`` fails stays unset; a
  candidate the space cannot run (a tree with more draft tokens than nodes) is dropped, as
  auto_benchmark drops candidates the device cannot run. Duplicates are dropped after that.
- The base stage runs each candidate group's plain (no speculation) config when the space has
  one. When speculation is fixed on, it runs the group's default speculative config instead: the
  search measures the group's baseline before it (so a base candidate costs two trials there, one
  in auto_benchmark) and the stage ranks groups by that baseline's tok/s, as auto_benchmark does.
- ``max_candidates`` is off by default (the whole tier runs); after both stages, or when every
  base candidate failed, the sampler draws untried configs at random, so a budget larger than
  the plan still works.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ConfigError
from autotune.search.samplers._candidates import ALGO, DRAFT, STEPS, TOPK
from autotune.search.samplers._observations import finished, read_observation
from autotune.search.samplers._planned import PlannedSampler
from autotune.space._schema_names import is_speculation_only
from autotune.space.replay import ReplayTrial, UnfitValue

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

#: ``build_candidates``' cuts per tier: (knobs kept, values kept per knob, knobs in the product).
TIER_CUTS = {1: (6, 2, 0), 2: (8, 3, 3)}
_IN_FLIGHT = (TrialState.RUNNING, TrialState.WAITING)
TRIPLE = (STEPS, TOPK, DRAFT)


def default_value(values: Sequence[Any]) -> Any:
    """A knob's default: unset (null) if it can be, false for a boolean flag, else the first."""
    if any(v is None for v in values):
        return None
    if any(v is False for v in values):
        return False
    return values[0]


def tier_overlays(knobs: Sequence[tuple[str, Sequence[Any]]], tier: int) -> list[dict[str, Any]]:
    """The candidates of one stage as overlays on the defaults, in auto_benchmark's order.

    Args:
        knobs: (name, values) in priority order, already cut to the tier's knobs and values.
        tier: 1 (one knob at a time) or 2 (product of the first knobs, then one at a time).

    Returns:
        ``{}`` (the baseline) first, then one dict per candidate of the knobs it changes.
    """
    if tier not in TIER_CUTS:
        raise ValueError(f"auto_benchmark tier must be one of {sorted(TIER_CUTS)}, got {tier}")
    head_n = TIER_CUTS[tier][2]
    head, tail = list(knobs[:head_n]), list(knobs[head_n:])
    out: list[dict[str, Any]] = [{}]
    if head:
        names = [name for name, _ in head]
        for combo in itertools.product(*[values for _, values in head]):
            out.append(dict(zip(names, combo, strict=True)))
    for name, values in tail:
        out.extend({name: v} for v in values)
    return out


class AutoBenchmarkTierSampler(PlannedSampler):
    """SGLang ``auto_benchmark``'s tiered search: a base stage, then a speculative stage.

    Follows ``build_candidates`` and ``run_auto_benchmark`` in SGLang's
    ``python/sglang/auto_benchmark_lib.py`` (https://github.com/sgl-project/sglang, commits
    2e45aa87 and e5c00dc8) and the "Search Tiers" section of
    ``.claude/skills/sglang-auto-benchmark/SKILL.md`` (commit 10c578e3); see the module docstring
    for how its flags map onto a space. After both stages it samples untried configs at random.

    Args:
        space: The loaded ``SearchSpace``.
        tier: 1 or 2.
        seed: Seed of the random continuation.
        max_knobs: Knobs kept per stage (None: the tier's, 6 or 8).
        values_per_knob: Values kept per knob (None: the tier's, 2 or 3).
        max_candidates: Cap on each stage's candidates, baseline included (auto_benchmark's
            ``search.max_candidates``; None: no cap).
    """

    def __init__(self, space: SearchSpace, *, tier: int, seed: int | None = None,
                 max_knobs: int | None = None, values_per_knob: int | None = None,
                 max_candidates: int | None = None) -> None:
        super().__init__(space, seed=seed)
        if tier not in TIER_CUTS:
            raise ValueError(f"auto_benchmark tier must be one of {sorted(TIER_CUTS)}, got {tier}")
        if max_candidates is not None and max_candidates < 1:
            raise ValueError("max_candidates must be >= 1 or None")
        knobs, values, _ = TIER_CUTS[tier]
        self.tier = tier
        self.max_knobs = knobs if max_knobs is None else max_knobs
        self.values_per_knob = values if values_per_knob is None else values_per_knob
        self.max_candidates = max_candidates
        self.last_reason: str | None = None
        self._base: list[int] | None = None
        self._spec: dict[int, list[int]] = {}
        self._spec_defaults: dict[str, Any] | None = None

    # ------------------------------------------------------------------ the stages
    def _stage_params(self, speculative: bool) -> list[Any]:
        return [p for name, p in self.space.parameters.items()
                if is_speculation_only(name) == speculative]

    @staticmethod
    def _values(p: Any, n: int | None = None) -> list[Any]:
        """A parameter's values as listed (a range ascending), the first ``n`` of them."""
        values = (v for v in p.values() if not (p.name == ALGO and v is None))
        return list(itertools.islice(values, n))

    def _knobs(self, speculative: bool) -> list[tuple[str, list[Any]]]:
        """The stage's knobs in file order, cut to the tier's knobs and values."""
        knobs = [(p.name, self._values(p, self.values_per_knob))
                 for p in self._stage_params(speculative) if len(self._values(p, 2)) >= 2]
        return knobs[:self.max_knobs]

    def _defaults(self, speculative: bool) -> dict[str, Any]:
        out = {}
        for p in self._stage_params(speculative):
            if p.name == ALGO:
                out[p.name] = self._values(p, 1)[0]
            elif p.type == "categorical":
                out[p.name] = default_value(list(p.choices or ()))
            else:
                out[p.name] = self._values(p, 1)[0]
        return out

    @property
    def spec_defaults(self) -> dict[str, Any]:
        """The speculative knobs' defaults: SGLang's auto-picked triple where the space runs it."""
        if self._spec_defaults is None:
            from autotune.space.warm_start import sglang_default  # it imports the samplers package

            out = self._defaults(True)
            warm = sglang_default(self.space)
            if warm.params is not None and warm.triple is not None:
                out.update({k: v for k, v in zip(TRIPLE, warm.triple, strict=True) if k in out})
                if ALGO in out and warm.algorithm is not None:
                    out[ALGO] = warm.algorithm
            self._spec_defaults = out
        return self._spec_defaults

    def _resolve(self, values: Mapping[str, Any]) -> int | None:
        """The config the space's define-by-run makes of these values, or None if it cannot."""
        try:
            params = self.space.suggest(ReplayTrial(
                values, fallback=lambda choices, low: default_value(choices) if choices is not None else low))
        except (UnfitValue, ConfigError):
            return None
        return self.table.find(params)

    def _stage(self, overlays: Sequence[Mapping[str, Any]],
               values_of: Any) -> list[int]:
        """Resolve each overlay (``values_of`` gives the values to try, first that resolves
        wins), drop what the space cannot run and duplicates, cap at ``max_candidates``."""
        out: list[int] = []
        for overlay in overlays:
            idx = next((i for i in map(self._resolve, values_of(overlay)) if i is not None),
                       None)
            if idx is None or idx in out:
                continue
            out.append(idx)
            if self.max_candidates is not None and len(out) >= self.max_candidates:
                break
        return out

    @property
    def base_plan(self) -> list[int]:
        """The base stage's candidate indices, in order."""
        if self._base is None:
            # The plain config where the space has one, else the group's default speculative
            # config (the search measures the group's baseline before it).
            spec_defaults = self.spec_defaults
            tries = [spec_defaults]
            if ALGO in self.space.parameters and any(
                    c is None for c in (self.space.parameters[ALGO].choices or ())):
                tries = [{ALGO: None}, spec_defaults]
            base_defaults = self._defaults(False)
            overlays = tier_overlays(self._knobs(False), self.tier)
            self._base = self._stage(
                overlays, lambda o: [{**base_defaults, **t, **o} for t in tries])
        return self._base

    def spec_plan(self, group: int) -> list[int]:
        """The speculative stage's candidate indices on top of one group's settings."""
        if group not in self._spec:
            settings = {k: v for k, v in self.table.groups[group].items() if k != ALGO}
            spec_defaults = self.spec_defaults
            overlays = tier_overlays(self._knobs(True), self.tier)
            self._spec[group] = self._stage(
                overlays, lambda o: [{**settings, **spec_defaults, **o}])
        return self._spec[group]

    def best_group(self, study: Study) -> int | None:
        """The base stage's winner: the group whose base trial measured the most baseline tok/s.

        Only the base stage's own trials count, so the winner stays put while the speculative
        stage runs. A base trial of a plain config measures the baseline itself; one of a
        default speculative config reports it as ``baseline_tok_s``. A group whose baseline
        failed is out. Without baseline data (a study that reports only its objective), the
        base trials' objective values rank the groups. Ties go to the earlier candidate. While
        base trials are still running and none has a result, the first base candidate's group;
        None when every base trial has finished and none ran.
        """
        base = self.base_plan
        position = {i: n for n, i in enumerate(base)}
        baseline: dict[int, float] = {}
        objective: dict[int, float] = {}
        failed: set[int] = set()
        pending = False
        for t in study.get_trials(deepcopy=False):
            idx = self.trial_index(t)
            if idx not in position:
                continue
            if not finished(t):
                pending = pending or t.state in _IN_FLIGHT
                continue
            obs = read_observation(t, idx)
            if obs.baseline_failed:
                failed.add(idx)
            elif not self.table.spec[idx] or obs.is_baseline:
                if obs.ok:
                    baseline[idx] = obs.measured
            elif obs.baseline_tok_s is not None:
                baseline[idx] = obs.baseline_tok_s
            if obs.ok:
                objective[idx] = obs.measured
        score = baseline if baseline else objective
        ranked = [i for i in base if i in score and i not in failed]
        if ranked:
            return int(self.table.group[max(ranked, key=lambda i: (score[i], -position[i]))])
        if pending:
            return int(self.table.group[base[0]])
        return None

    # ------------------------------------------------------------------ PlannedSampler
    def plan(self, study: Study, trial: FrozenTrial) -> int | None:
        tried = self.tried(study, trial)
        self.last_reason = None
        for i in self.base_plan:
            if not tried[i]:
                self.last_reason = "base"
                return i
        group = self.best_group(study)
        if group is not None:
            for i in self.spec_plan(group):
                if not tried[i]:
                    self.last_reason = "speculative"
                    return i
        left = np.flatnonzero(~tried)
        if len(left) == 0:
            optuna.logging.get_logger(__name__).info(
                "auto_benchmark tier %d: every config tried; sampling at random", self.tier)
            return None
        key = None if self.seed is None else [self.seed % 2**63, trial.number]
        rng = np.random.default_rng(key)
        self.last_reason = "random"
        return int(rng.choice(left))


class AutoTier1Sampler(AutoBenchmarkTierSampler):
    """SGLang auto_benchmark tier 1: each knob alone over the baseline (first 6 knobs, 2 values),
    base stage then speculative stage, then random. See :class:`AutoBenchmarkTierSampler`."""

    def __init__(self, space: SearchSpace, *, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(space, tier=1, seed=seed, **kwargs)


class AutoTier2Sampler(AutoBenchmarkTierSampler):
    """SGLang auto_benchmark tier 2: the product of the first 3 knobs, then each further knob
    alone (first 8 knobs, 3 values), base stage then speculative stage, then random. See
    :class:`AutoBenchmarkTierSampler`."""

    def __init__(self, space: SearchSpace, *, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(space, tier=2, seed=seed, **kwargs)
