"""What bench_search's evaluators, its conclusion and its landscape families judge alike.

The feasibility rule (:func:`pays`, strictly above the space's ``min_speedup``), whether a config
ran (:func:`runs`) and the seeded noise draw (:func:`noise_rng`). They sit below
:mod:`~autotune.search.benchmark.problem`, :mod:`~autotune.search.benchmark.conclusion`,
:mod:`~autotune.search.benchmark.landscape` and :mod:`~autotune.search.benchmark.families`, so
that none of those imports another to reach them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from autotune.trial.outcome import Status


def noise_rng(seed: int, key: tuple, n: Any) -> np.random.Generator:
    """The generator of measurement ``n`` of config ``key`` in seed ``seed``, whoever asks."""
    digest = hashlib.blake2b(repr((seed, key, n)).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "big"))


def min_speedup(space: Any) -> float:
    return float(getattr(space.constraints, "min_speedup", 1.0) or 1.0)


def pays(speedup: float | None, space: Any) -> bool:
    """Whether a speculative config with this speedup over its baseline is feasible.

    Strictly more than the space's ``min_speedup``: a tie is not a win (as the trainable judges).
    """
    return speedup is not None and speedup > min_speedup(space)


def runs(truth: Mapping[str, Any]) -> bool:
    """Whether a config ran and has a tok/s; unknown tok/s is a failure, never 0."""
    return truth.get("status") == Status.OK and truth.get("output_tok_s") is not None
