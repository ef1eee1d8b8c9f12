"""Optuna samplers for autotune searches, by the name a space file gives (``search.sampler``).

- ``tpe``: Optuna's TPE with its defaults (constraints come from ``trial.set_constraint``);
- ``random``: Optuna's random sampler;
- ``grid``: every config in the order of SGLang's ``bench_speculative.py``
  (:class:`GridOrderSampler`);
- ``phase-model``: :class:`PhaseModelSampler`, which fits the speculative cycle from the phase
  profiles and accept data trials report, and needs far fewer trials.

The peers' strategies the sampler benchmark sets these against (SGLang ``auto_benchmark``'s tiers)
are not product samplers: they live with the benchmark, in the checkout's ``benchmarks/search/``.
See ``docs/samplers.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from optuna.samplers import BaseSampler, RandomSampler, TPESampler

from autotune.search.samplers._fit import Settings as PhaseModelSettings
from autotune.search.samplers._observations import USER_ATTR_KEYS
from autotune.search.samplers._planned import GridOrderSampler, PlannedSampler
from autotune.search.samplers.phase_model import PhaseModelSampler

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

__all__ = [
    "SAMPLER_NAMES",
    "USER_ATTR_KEYS",
    "GridOrderSampler",
    "PhaseModelSampler",
    "PhaseModelSettings",
    "PlannedSampler",
    "make_sampler",
]

SAMPLER_NAMES = ("tpe", "random", "grid", "phase-model")


def make_sampler(name: str, *, seed: int | None, space: SearchSpace) -> BaseSampler:
    """The sampler a space's ``search.sampler`` names.

    Args:
        name: One of :data:`SAMPLER_NAMES`.
        seed: Seed (None: nondeterministic).
        space: The loaded ``SearchSpace`` (``grid`` and ``phase-model`` enumerate it).

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
    raise ValueError(f"unknown sampler {name!r}; choose one of: {', '.join(SAMPLER_NAMES)}")
