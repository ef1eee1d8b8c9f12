"""Bounded numeric flag types: every command's numeric flag is checked while parsing, so an absurd
value (a negative count, a seed numpy cannot take, a pasted megabyte) is exit 2 and one line with
the allowed range, never a traceback after Ray started. :mod:`autotune.command_line` re-exports them.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["MAX_COUNT", "MAX_SEED", "float_in", "int_in", "int_list", "non_negative_int", "port", "positive_float",
           "positive_int", "seed"]

#: The largest count a flag takes: what a C int holds, as Ray, numpy and SGLang read one.
MAX_COUNT = 2**31 - 1
#: The largest seed: Optuna's and numpy's generators take 0..2**32-1.
MAX_SEED = 2**32 - 1
#: How much of a rejected value an error line shows (a pasted megabyte stays one short line).
_SHOWN = 40


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer from ``low`` to ``high``, both included.

    Anything else is argparse's usage error (exit 2) with the allowed range, before anything runs.
    """
    if low > high:
        raise ValueError(f"int_in: low {low} is above high {high}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer from {low} to {high}; got {_shown(text)}")
        return value

    parse.__name__ = f"integer from {low} to {high}"
    return parse


def float_in(low: float, high: float = math.inf, *, low_included: bool = True) -> Callable[[str], float]:
    """An argparse ``type``: a finite number from ``low`` (included unless ``low_included`` is
    False) up to ``high`` (included); NaN and infinities are refused."""
    above = f"{'at least' if low_included else 'above'} {low:g}"
    allowed = f"a number {above}" + (f" and at most {high:g}" if math.isfinite(high) else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) and (value >= low if low_included else value > low) and value <= high
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {allowed}; got {_shown(text)}")
        return value

    parse.__name__ = allowed
    return parse


#: A count of things (trials, repeats, ranks, tokens, iterations): 1 or more.
positive_int = int_in(1, MAX_COUNT)
#: A count that may be zero (warm-up iterations).
non_negative_int = int_in(0, MAX_COUNT)
#: A sampler's seed.
seed = int_in(0, MAX_SEED)
#: A TCP port.
port = int_in(1, 65535)
#: A duration or a size in seconds or units: above 0, finite.
positive_float = float_in(0.0, low_included=False)


def int_list(item: Callable[[str], int]) -> Callable[[str], tuple[int, ...]]:
    """An argparse ``type``: comma-separated integers, each as ``item`` allows, at least one."""

    def parse(text: str) -> tuple[int, ...]:
        values = tuple(item(v.strip()) for v in text.split(",") if v.strip())
        if not values:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers; got {_shown(text)}")
        return values

    return parse
