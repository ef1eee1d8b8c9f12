"""The one test of a usable number: finite, and not a bool.

Figures come back from JSON, MLflow, Optuna user attrs and ``/server_info`` as anything at all; a
NaN, an infinity, a string or a missing value is unknown, never a number to rank or plot. ``True``
is an ``int`` to Python but never a measurement, so a bool is not a number here.
"""

from __future__ import annotations

import math

__all__ = ["finite"]


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
