"""Optuna samplers for autotune searches, by the name a space file gives (``search.sampler``).

- ``tpe``: Optuna's TPE with its defaults (constraints come from ``trial.set_constraint``);
- ``random``: Optuna's random sampler;
- ``grid``: every config in the order of SGLang's ``bench_speculative.py``
  (:class:`GridOrderSampler`);
- ``phase-model``: :class:`PhaseModelSampler`, which fits the speculative cycle from the phase
  profiles and accept data trials report, and needs far fewer trials;
- ``auto-tier1``, ``auto-tier2``: SGLang ``auto_benchmark``'s tier 1 and tier 2 searches
  (:class:`AutoTier1Sampler`, :class:`AutoTier2Sampler`), peers' strategies for
  ``python -m autotune.bench_search``, then random.

See ``docs/samplers.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from optuna.samplers import BaseSampler, RandomSampler, TPESampler

from autotune.search.samplers._fit import Settings as PhaseModelSettings
from autotune.search.samplers._observations import USER_ATTR_KEYS
from autotune.search.samplers._peers import AutoBenchmarkTierSampler, AutoTier1Sampler, AutoTier2Sampler
from autotune.search.samplers._planned import GridOrderSampler, PlannedSampler
from autotune.search.samplers.phase_model import PhaseModelSampler

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

__all__ = [
    "SAMPLER_NAMES",
    "USER_ATTR_KEYS",
    "AutoBenchmarkTierSampler",
    "AutoTier1Sampler",
    "AutoTier2Sampler",
    "GridOrderSampler",
    "PhaseModelSampler",
    "PhaseModelSettings",
    "PlannedSampler",
    "make_sampler",
]

SAMPLER_NAMES = ("tpe", "random", "grid", "phase-model", "auto-tier1", "auto-tier2")


def make_sampler(name: str, *, seed: int | None, space: SearchSpace) -> BaseSampler:
    """The sampler a space's ``search.sampler`` names.

    Args:
        name: One of :data:`SAMPLER_NAMES`.
        seed: Seed (None: nondeterministic).
        space: The loaded ``SearchSpace`` (``grid``, ``phase-model`` and the ``auto-tier``
            samplers enumerate it).

    Raises:
        ValueError: For an unknown name.
        ConfigError: An enumerating sampler on a space it cannot enumerate (a float parameter
            without a step).
    """
    key = name.strip().lower().replace("_", "-")
    if key == "tpe":
        return TPESampler(seed=seed)
    if key == "random":
        return RandomSampler(seed=seed)
    if key == "grid":
        return GridOrderSampler(space, seed=seed)
    if key in ("phase-model", "phasemodel"):
        return PhaseModelSampler(space, seed=seed)
    if key == "auto-tier1":
        return AutoTier1Sampler(space, seed=seed)
    if key == "auto-tier2":
        return AutoTier2Sampler(space, seed=seed)
    raise ValueError(f"unknown sampler {name!r}; choose one of: {', '.join(SAMPLER_NAMES)}")
