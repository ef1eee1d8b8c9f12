"""A stand-in for ``optuna.Trial`` that answers ``SearchSpace.suggest`` from chosen values.

Running chosen values through the space's own define-by-run applies what the space forces and
skips what its conditions leave out, so a caller gets the config the space would run (and the
values a sampler would be asked for, what ``enqueue_trial`` takes) without restating the rules.
Used by the warm start (:mod:`autotune.space.warm_start`) and the auto_benchmark tiers
(the sampler benchmark's peers, ``benchmarks/search/peers.py`` in the checkout).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.space._expr import values_equal

__all__ = ["ReplayTrial", "UnfitValue"]


class UnfitValue(ValueError):
    """A chosen value the space cannot take there; ``name`` is the parameter."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class ReplayTrial:
    """Answers ``suggest_*`` with ``values[name]``; records what was asked in ``asked``.

    Args:
        values: Parameter name -> chosen value.
        fallback: For a parameter ``values`` lacks: ``fallback(choices, low)`` gives its value
            (``choices`` is None for a numeric parameter). Without it a missing value is unfit.
    """

    def __init__(self, values: Mapping[str, Any], *,
                 fallback: Callable[[Sequence[Any] | None, Any], Any] | None = None) -> None:
        self.values, self.fallback = values, fallback
        self.asked: dict[str, Any] = {}

    def _value(self, name: str, choices: Sequence[Any] | None, low: Any) -> Any:
        if name in self.values:
            return self.values[name]
        if self.fallback is None:
            raise UnfitValue(name, f"no value chosen for {name}")
        return self.fallback(choices, low)

    def _ask(self, name: str, value: Any) -> Any:
        self.asked[name] = value
        return value

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        value = self._value(name, list(choices), None)
        for c in choices:
            if values_equal(c, value):
                return self._ask(name, c)
        raise UnfitValue(name, f"{name}={value} is not one of the space's choices "
                               f"({', '.join(str(c) for c in choices)})")

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        value = self._value(name, None, low)
        step = max(int(step or 1), 1)
        if (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high
                or (value - low) % step):
            raise UnfitValue(name, f"{name}={value} is outside the space's {low}..{high}"
                                   + (f" step {step}" if step != 1 else ""))
        return self._ask(name, value)

    def suggest_float(self, name: str, low: float, high: float, step: float | None = None,
                      log: bool = False) -> float:
        value = self._value(name, None, low)
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high
                or (step and not math.isclose((value - low) / step, round((value - low) / step),
                                              abs_tol=1e-6))):
            raise UnfitValue(name, f"{name}={value} is outside the space's {low}..{high}"
                                   + (f" step {step}" if step else ""))
        return self._ask(name, float(value))
