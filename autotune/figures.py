"""The one test of a usable number (finite, and not a bool), and the one estimator of noise.

Figures come back from JSON, MLflow, Optuna user attrs and ``/server_info`` as anything at all; a
NaN, an infinity, a string or a missing value is unknown, never a number to rank or plot. ``True``
is an ``int`` to Python but never a measurement, so a bool is not a number here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["finite", "pooled_log_sd", "shown"]


def finite(value: object) -> float | None:
    """``value`` as a float when it is a finite number, else None (unknown).

    Args:
        value: Anything; only an ``int`` or ``float`` that is not a bool and not NaN or infinite counts.

    Returns:
        The number as a float, or None.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def shown(value: float, *, digits: int = 4) -> float:
    """``value`` rounded as a person reads it: ``digits`` significant digits, never fewer than one
    decimal (``1.958762`` is ``1.959``, ``1958.76`` is ``1958.8``, ``0.00123456`` is ``0.001235``).

    What MLflow stores and shows (its UI prints a float in full). Measurements carry about 1%
    noise, so the digits dropped are below it, and one decimal of a tok/s keeps two configs that
    differ in their figures apart.

    Args:
        value: A finite number (:func:`finite`'s); a non-finite one is returned as it is.
        digits: Significant digits kept.
    """
    if not math.isfinite(value) or value == 0:
        return value
    decimals = max(1, digits - 1 - math.floor(math.log10(abs(value))))
    return round(value, decimals)


def pooled_log_sd(groups: Iterable[Sequence[float]]) -> tuple[float, int, int]:
    """Pooled within-group standard deviation of ln x: ``(sd, groups used, values used)``.

    Groups of fewer than two values carry no spread and are left out. Raises ValueError on a
    value that is not a positive finite number, or when no group has two values.
    """
    ss, dof, used, values = 0.0, 0, 0, 0
    for xs in groups:
        xs = list(xs)
        if len(xs) < 2:
            continue
        for x in xs:
            if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) \
                    or x <= 0:
                raise ValueError(f"a tok/s repeat must be a positive number, got {x!r}")
        logs = [math.log(x) for x in xs]
        mean = sum(logs) / len(logs)
        ss += sum((v - mean) ** 2 for v in logs)
        dof += len(logs) - 1
        used += 1
        values += len(logs)
    if dof == 0:
        raise ValueError("no group has two values or more: no spread to measure")
    return math.sqrt(ss / dof), used, values
